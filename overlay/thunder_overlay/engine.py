"""The patch engine: decides once per process whether thunder runs patched, and loads the patched modules.

The start-up finder calls :func:`decide` at the first import of thunder or of a module of it. Before
anything is patched, the engine finds every file of thunder the series changes the way the import system
would, without importing it, and identifies the base by their sha256s (the manifest maps each base to
{file: sha256}; release metadata only names the base in messages). A known base gets its series, from the
bytecode cache when a valid entry exists, otherwise applied in memory to every file and compiled. Bytes
of no known base are patched only when THUNDER_OVERLAY_BASE names a series and every hunk of every file
applies with exact context. One unknown or edited file, one hunk that does not apply, or one target module
imported before the decision, and no file is patched: the reason is in ``outcome``, and the start-up
finder lets stock thunder load with one warning, or, under THUNDER_OVERLAY=strict, fails the import with
an ImportError that says why. The files on disk are never written.
"""

from __future__ import annotations

import hashlib
import importlib.abc
import importlib.machinery
import linecache
import os
import sys
from pathlib import Path

from thunder_overlay import bytecode_cache, config, locate
from thunder_overlay.config import OverlayRefusal

# manifest, patching and patchset are imported only when the series must be read: not for a warm cache entry.


class Target:
    """One file of thunder, found as the import system would find it: its bytes' sha256, the sha256 the
    base lists for it and, once patched, its text and code."""

    __slots__ = ("path", "module", "origin", "sha256", "stamp", "base_sha256", "source", "text", "code")

    def __init__(self, path: str, origin: str | None, sha256: str | None, stamp: tuple = (None, None)):
        self.path, self.module, self.origin, self.sha256 = path, locate.module_name(path), origin, sha256
        self.stamp = stamp  # (size, mtime_ns) of the file when it was hashed
        self.base_sha256 = self.source = self.text = self.code = None

    def key(self) -> list:
        return [self.path, self.origin, self.sha256, *self.stamp]

    @property
    def is_package(self) -> bool:
        return self.path.endswith("/__init__.py")

    def report(self) -> dict:
        module = sys.modules.get(self.module)
        return {
            "module": self.module,
            "path": self.origin,
            "sha256": self.sha256,
            "base_sha256": self.base_sha256,
            "matches_base": self.sha256 is not None and self.sha256 == self.base_sha256,
            "imported": module is not None,
            "patched": isinstance(getattr(module, "__loader__", None), PatchedSourceLoader),
        }


def _find(locator: locate.Locator, path: str, known: list | None = None) -> Target:
    """The file the import system would load for ``path``'s module, and its sha256 (None: no such file).
    ``known``: [path, origin, sha256, size, mtime_ns] stored for it; when the file found is that origin with
    that size and modification time, the stored sha256 is taken without reading it (as a ``.pyc`` trusts
    its source's stamp)."""
    origin = locator.source_file(locate.module_name(path))
    if origin is None:
        return Target(path, None, None)
    if known is not None and known[1] == origin:
        try:
            st = os.stat(origin)
        except OSError:
            st = None
        if st is not None and [st.st_size, st.st_mtime_ns] == known[3:]:
            return Target(path, origin, known[2], (st.st_size, st.st_mtime_ns))
    with open(origin, "rb") as f:
        st = os.fstat(f.fileno())
        source = f.read()
    target = Target(path, origin, hashlib.sha256(source).hexdigest(), (st.st_size, st.st_mtime_ns))
    target.source = source
    return target


class Plan:
    """What the overlay does (or did) to the installed thunder; ``status()`` reports it. (A plain class, not
    a dataclass: creating a dataclass costs about a millisecond, paid on every patched import.)"""

    def __init__(self, state: str, **fields):
        unknown = set(fields) - set(config.REPORT_FIELDS) - {"targets"}
        if unknown:
            raise TypeError(f"unknown Plan fields: {sorted(unknown)}")
        for name, empty in config.REPORT_FIELDS.items():
            value = fields.get(name, empty)
            setattr(self, name, list(value) if isinstance(value, tuple) else value)
        self.state = state
        self.targets: list[Target] = fields.get("targets", [])
        self.specs: dict = {}  # module name -> spec of the patched module, made before any is loaded

    def describe_install(self):
        """How thunder is installed (found once, lazily: only reports and refusals need it)."""
        if self.install is None and self.thunder_path is not None:
            from thunder_overlay import install_info

            hashes = {t.path: t.sha256 for t in self.targets if t.sha256}
            self._install = install_info.describe(Path(self.thunder_path), hashes)
            self.install, self.thunder_version = self._install.description, self._install.release
        return getattr(self, "_install", None)

    def report(self) -> dict:
        self.describe_install()
        self.files = [t.report() for t in self.targets]
        return {name: list(v) if isinstance(v := getattr(self, name), list) else v for name in config.REPORT_FIELDS}


# The outcome of the one decision in this process.
outcome: Plan | None = None


def _from_cache(result: Plan, locator: locate.Locator, directory: Path, switch: str | None) -> str | None:
    """Fill ``result`` from the cache entry of this thunder when its stored key equals the key computed now
    from the files it names; otherwise return why not (None: there is no entry)."""
    path = bytecode_cache.entry_path(result.thunder_path)
    if path is None:
        return None
    entry = None
    try:
        entry = bytecode_cache.read(path)
        found = {known[0]: _find(locator, known[0], known) for known in entry.key["files"]}
        series_dir = Path(entry.key["series_dir"])
        key_files = [t.key() for t in found.values()]
        now = bytecode_cache.make_key(result.thunder_path, key_files, directory, series_dir, switch)
        if entry.key != now:
            entry.close()
            return f"its key differs in {', '.join(sorted(k for k in now if entry.key.get(k) != now[k]))}"
        facts = {name: entry.facts[name] for name in bytecode_cache.FACTS}
        if len(entry.files) != len(entry.facts["base_sha256"]):
            raise ValueError("corrupt entry: the files and their facts differ in number")
        targets = []
        for (p, text, code), base_sha256 in zip(entry.files, entry.facts["base_sha256"]):
            target = found[p]
            target.base_sha256, target.text, target.code = base_sha256, text, code
            targets.append(target)
    except (FileNotFoundError, NotADirectoryError):
        return None
    except Exception as e:  # unreadable, corrupt, foreign: a cache problem never refuses the patch
        if entry is not None:
            entry.close()
        return f"{type(e).__name__}: {e}"
    for name, value in facts.items():
        setattr(result, name, value)
    result.targets, result.series_dir = targets, str(series_dir)
    result.bytecode_cache = f"hit: {path}"
    return "hit"


def _patch(result: Plan, locator: locate.Locator, directory: Path, switch: str | None) -> None:
    from thunder_overlay import manifest, patching

    bases = manifest.load(directory)
    found = {path: _find(locator, path) for path in manifest.target_paths(bases)}
    patching.patch_files(result, bases, found, directory, switch)


def plan(locator: locate.Locator, thunder_spec) -> Plan:
    """Identify the thunder of ``thunder_spec`` by the sha256 of every file a series changes and patch and
    compile them all in memory, or say why not; never raises."""
    directory, override = config.patches_dir()
    directory = Path(directory)
    switch = None
    if os.environ.get(config.BASE_ENV, "").strip():
        from thunder_overlay import manifest  # imported here only when THUNDER_OVERLAY_BASE is set

        switch = manifest.base_switch(str(directory))
    result = Plan(state="refused", thunder_path=locate.package_folder(thunder_spec), patches_dir=str(directory),
                  patches_override=override, base_switch=switch)
    try:
        cached = _from_cache(result, locator, directory, switch)
        if cached != "hit":
            _patch(result, locator, directory, switch)
            if cached:
                done = "replaced" if result.bytecode_cache.startswith("written") else "did not replace"
                result.bytecode_cache += f" ({done} an entry that was not used: {cached})"
        imported = [t for t in result.targets if t.module in sys.modules]
        if imported:
            raise OverlayRefusal(
                f"{imported[0].module} ({imported[0].origin}) was imported before the overlay's finder was "
                "installed; patching the other files alone would run patched and stock thunder code together"
            )
    except OverlayRefusal as e:
        result.reason = str(e)
    except Exception as e:  # PatchError, OSError, SyntaxError, a corrupt manifest ...: never a half-patch
        result.reason = f"{type(e).__name__}: {e}"
    for target in result.targets:
        target.source = None
    if result.reason:
        result.state, result.patches = "refused", []
        for target in result.targets:
            target.text = target.code = None
    return result


def decide(finder) -> Plan | None:
    """The process's one decision, made at the first call; None while no thunder can be found (the import
    then fails as it would without the overlay)."""
    global outcome
    if outcome is None:
        locator = locate.Locator(skip=finder)
        spec = locator.spec(config.PACKAGE)
        if spec is None or spec.submodule_search_locations is None:
            return None
        result = plan(locator, spec)
        if result.reason is None:  # every spec before any module is loaded: a fault here patches nothing
            result.specs = {target.module: _spec(target) for target in result.targets}
        outcome = result
    return outcome


def _spec(target: Target) -> importlib.machinery.ModuleSpec:
    spec = importlib.machinery.ModuleSpec(target.module, PatchedSourceLoader(target), origin=target.origin,
                                          is_package=target.is_package)
    if target.is_package:
        spec.submodule_search_locations = [os.path.dirname(target.origin)]
    spec.has_location = True
    return spec


class PatchedSourceLoader(importlib.abc.Loader):
    """Executes the patched code as the module. The code's filename says the module is patched, and
    linecache holds the patched lines under that name, so tracebacks and inspect.getsource of its functions
    and classes show what runs. ``__file__`` and ``__spec__.origin`` stay the file on disk, unchanged: thunder
    opens its own file (interpreter.py does, at import) and finds files beside it."""

    def __init__(self, target: Target):
        self.target = target

    def get_source(self, fullname: str) -> str | None:
        """The patched text; None (no lines shown) for a text from the cache that fails its sha256."""
        return bytecode_cache.text(self.target.text)

    def get_code(self, fullname: str):
        return self.target.code

    def is_package(self, fullname: str) -> bool:
        return self.target.is_package

    def exec_module(self, module) -> None:
        filename = config.patched_filename(self.target.origin)
        # A lazy entry: linecache asks get_source the first time a traceback or inspect needs the lines.
        linecache.cache.pop(filename, None)
        linecache.lazycache(filename, module.__dict__)
        # inspect.getsourcefile and findsource (thunder asks them for source positions while tracing) map a
        # code's file to its module through inspect's cache; a file that is not on disk misses it, and every
        # miss scans all of sys.modules
        inspect = sys.modules.get("inspect")
        if inspect is not None and isinstance(getattr(inspect, "modulesbyfile", None), dict):
            inspect.modulesbyfile[filename] = module.__name__
        exec(self.target.code, module.__dict__)


def imported_targets() -> list[str]:
    """Modules some series of the manifest changes that are imported already (read from the manifest: for
    enable() and status(), never on the import path)."""
    from thunder_overlay import manifest

    try:
        paths = manifest.target_paths(manifest.load())
    except Exception:
        return []
    return [m for m in map(locate.module_name, paths) if m in sys.modules]


def dry_run(finder) -> Plan:
    """What importing thunder would do, found without importing it (``finder``: the overlay's, if installed)."""
    locator = locate.Locator(skip=finder)
    spec = locator.spec(config.PACKAGE)
    if spec is None or spec.submodule_search_locations is None:
        return Plan(state="not-installed", reason="thunder is not installed (no importable 'thunder' package)")
    result = plan(locator, spec)
    result.state = config.READY.get(result.state, result.state)
    return result
