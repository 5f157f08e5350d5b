"""The patch engine: plans, loads and reports the patched thunder.core.jit_ext.

The start-up finder hands the import of ``thunder.core.jit_ext`` to :func:`find_patched_spec`. It finds
the upstream file the way the import system would and identifies its base by the file's sha256 (the
manifest maps sha256 -> series; release metadata only names the base in messages). A known base gets its
series, from the bytecode cache when a valid entry exists, otherwise applied in memory and compiled.
An unknown file is patched only when THUNDER_OVERLAY_BASE names a series and every hunk applies with
exact context. The file on disk is never written. A refusal returns no spec, with the reason in
``outcome``: the start-up finder then lets stock thunder load with one warning, or, under
THUNDER_OVERLAY=strict, fails the import with an ImportError that says why.
"""

from __future__ import annotations

import hashlib
import importlib.abc
import importlib.machinery
import importlib.util
import linecache
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from thunder_overlay import bytecode_cache, config
from thunder_overlay.config import BASE_ENV

# manifest (and patchset) are imported only when the series must be read: not for a warm cache entry.
if TYPE_CHECKING:
    from thunder_overlay import manifest


class OverlayRefusal(Exception):
    """Why the overlay leaves thunder stock: unknown file, edited file, broken patch ..."""


class Plan:
    """What the overlay does (or did) to the installed thunder; ``status()`` reports it. (A plain class, not
    a dataclass: creating a dataclass costs about a millisecond, paid on every patched import.)"""

    def __init__(self, state: str, jit_ext_file: Path | None = None, **fields):
        unknown = set(fields) - set(config.REPORT_FIELDS)
        if unknown:
            raise TypeError(f"unknown Plan fields: {sorted(unknown)}")
        for name, empty in config.REPORT_FIELDS.items():
            value = fields.get(name, empty)
            setattr(self, name, list(value) if isinstance(value, tuple) else value)
        self.state = state
        self.patched_text: str | None = None
        self.code = None
        self.jit_ext_file = jit_ext_file

    def describe_install(self):
        """How thunder is installed (found once, lazily: only reports and refusals need it)."""
        if self.install is None and self.jit_ext_file is not None:
            from thunder_overlay import install_info

            self._install = install_info.describe(self.jit_ext_file, self.base_sha256)
            self.install, self.thunder_version = self._install.description, self._install.release
        return getattr(self, "_install", None)

    def report(self) -> dict:
        self.describe_install()
        return {name: list(v) if isinstance(v := getattr(self, name), list) else v for name in config.REPORT_FIELDS}


# What a cache entry records besides the text and code: the fields of a Plan that the key determines.
CACHED_FACTS = ("state", "known", "base", "base_releases", "base_switch", "patches")

# The outcome of the one real import of thunder.core.jit_ext in this process.
outcome: Plan | None = None


def _upstream_spec(finder, fullname: str, path) -> importlib.machinery.ModuleSpec | None:
    for other in sys.meta_path:
        if other is finder or not hasattr(other, "find_spec"):
            continue
        spec = other.find_spec(fullname, path)
        if spec is not None:
            return spec
    return None


def patched_filename(origin: str) -> str:
    return f"{origin} (patched by thunder-overlay)"


def _from_cache(result: Plan, origin: str, directory: Path, switch: str | None) -> str | None:
    """Fill ``result`` from the cache entry for ``origin`` when its stored key equals the key computed now
    from the files it names; otherwise return why not (None: there is no entry)."""
    path = bytecode_cache.entry_path(origin)
    if path is None:
        return None
    try:
        entry = bytecode_cache.read(path)
        series_dir = Path(entry.key["series_dir"])
        now = bytecode_cache.make_key(origin, result.base_sha256, directory, series_dir, switch)
        if entry.key != now:
            return f"its key differs in {', '.join(sorted(k for k in now if entry.key.get(k) != now[k]))}"
        facts = {name: entry.facts[name] for name in CACHED_FACTS}
    except FileNotFoundError:
        return None
    except Exception as e:  # unreadable, corrupt, foreign: a cache problem never refuses the patch
        return f"{type(e).__name__}: {e}"
    for name, value in facts.items():
        setattr(result, name, value)
    result.series_dir, result.patched_text, result.code = str(series_dir), entry.text, entry.code
    result.bytecode_cache = f"hit: {path}"
    return "hit"


def _choose_series(result: Plan, bases: list[manifest.Base], jit_ext_file: Path) -> manifest.Base:
    """The known base of these bytes or, for an unknown file, the series THUNDER_OVERLAY_BASE names."""
    from thunder_overlay import manifest

    known = manifest.base_for_sha256(bases, result.base_sha256)
    if known is not None:
        result.known = True
        if result.base_switch and manifest.series_by_name(bases, result.base_switch) is not known:
            result.base_switch += f" (not used: the file is the known base {known.name})"
        return known
    if result.base_switch:
        chosen = manifest.series_by_name(bases, result.base_switch)
        if chosen is None:
            raise OverlayRefusal(
                f"{BASE_ENV}={result.base_switch!r} names no patch series; valid names: "
                f"{manifest.series_names(bases)}"
            )
        return chosen
    install = result.describe_install()
    release = result.thunder_version
    shipped = manifest.base_for(bases, release) if release else None
    where = f"{jit_ext_file} ({f'thunder {release}, ' if release else ''}{result.install})"
    if shipped is not None and not install.record_matches:
        raise OverlayRefusal(
            f"{where} has sha256 {result.base_sha256}, but the release ships {shipped.sha256}: the installed "
            f"file was edited locally. If the edit keeps the patched lines, {BASE_ENV}={shipped.name} applies "
            "that series when every hunk applies with exact context"
        )
    raise OverlayRefusal(
        f"{where} has sha256 {result.base_sha256}, which is no known base (supported releases: "
        f"{', '.join(manifest.supported_releases(bases))}). For a newer thunder (upstream main), "
        f"{BASE_ENV}=<series> applies a series when every hunk applies with exact context; series: "
        f"{manifest.series_names(bases)}"
    )


def _patch(result: Plan, source: bytes, jit_ext_file: Path, origin: str, directory: Path, switch: str | None) -> None:
    from thunder_overlay import manifest
    from thunder_overlay.patchset import PatchApplyError, apply_series, read_series

    series = _choose_series(result, manifest.load(directory), jit_ext_file)
    result.base, result.base_releases, result.series_dir = series.name, list(series.releases), str(series.directory)
    key = bytecode_cache.make_key(origin, result.base_sha256, directory, series.directory, switch)
    patches = read_series(series.directory)
    try:
        result.patched_text = apply_series(source.decode("utf-8"), patches, manifest.TARGET_PATH)
    except PatchApplyError as e:
        if result.known:
            raise
        raise OverlayRefusal(
            f"{BASE_ENV}={result.base_switch}: the {series.name} series does not apply with exact context to "
            f"{jit_ext_file} (sha256 {result.base_sha256}): {e}"
        ) from None
    result.code = compile(result.patched_text, patched_filename(origin), "exec", dont_inherit=True)
    result.patches = [Path(p.name).name for p in patches]
    result.state = "patched" if result.known else "patched-unverified"
    facts = {name: getattr(result, name) for name in CACHED_FACTS}
    entry = bytecode_cache.Entry(key, facts, result.patched_text, result.code)
    result.bytecode_cache = bytecode_cache.write(origin, entry)


def plan(jit_ext_file: Path, origin: str | None = None) -> Plan:
    """Identify ``jit_ext_file`` by its sha256 and patch and compile its text in memory, or say why not;
    never raises. ``origin`` is the module's origin path (the file's path when not given)."""
    origin = origin or str(jit_ext_file)
    directory, override = config.patches_dir()
    directory = Path(directory)
    switch = os.environ.get(BASE_ENV, "").strip() or None
    result = Plan(
        state="refused", thunder_path=str(jit_ext_file.parents[1]), patches_dir=str(directory),
        patches_override=override, base_switch=switch, jit_ext_file=jit_ext_file,
    )
    try:
        source = jit_ext_file.read_bytes()
        result.base_sha256 = hashlib.sha256(source).hexdigest()
        cached = _from_cache(result, origin, directory, switch)
        if cached != "hit":
            _patch(result, source, jit_ext_file, origin, directory, switch)
            if cached:
                result.bytecode_cache += f" (replaced an entry that was not used: {cached})"
    except OverlayRefusal as e:
        result.reason = str(e)
    except Exception as e:  # PatchError, OSError, SyntaxError, a corrupt manifest ...: never a half-patch
        result.reason = f"{type(e).__name__}: {e}"
    if result.reason:
        result.state, result.patches, result.patched_text, result.code = "refused", [], None, None
    return result


def find_patched_spec(finder, fullname: str, path) -> importlib.machinery.ModuleSpec | None:
    """The spec of the patched module; None when there is no thunder or the overlay refuses (``outcome``
    then says why)."""
    global outcome
    spec = _upstream_spec(finder, fullname, path)
    if spec is None:
        return None  # no thunder: the import fails as it would without the overlay
    if not spec.origin or not spec.origin.endswith(".py"):
        outcome = Plan(state="refused", thunder_path=spec.origin,
                       reason=f"{fullname} is not loaded from a source file ({spec.origin}); nothing to patch")
    else:
        outcome = plan(Path(spec.origin), spec.origin)
    if outcome.state not in config.PATCHED_STATES:
        return None
    loader = PatchedSourceLoader(fullname, spec.origin, outcome.patched_text, outcome.code)
    patched = importlib.util.spec_from_loader(fullname, loader, origin=spec.origin)
    patched.has_location = True
    return patched


class PatchedSourceLoader(importlib.abc.Loader):
    """Executes the patched code as the module. ``__file__`` and the code's filename say the module is
    patched (``__spec__.origin`` stays the real file), and linecache holds the patched lines under that
    name, so tracebacks and inspect.getsource show what runs."""

    def __init__(self, fullname: str, origin: str, text: str, code):
        self.fullname, self.origin, self.text, self.code = fullname, origin, text, code

    def get_source(self, fullname: str) -> str:
        return self.text

    def get_code(self, fullname: str):
        return self.code

    def is_package(self, fullname: str) -> bool:
        return False

    def exec_module(self, module) -> None:
        filename = patched_filename(self.origin)
        module.__file__ = filename
        # A lazy entry: linecache asks get_source the first time a traceback or inspect needs the lines.
        linecache.cache.pop(filename, None)
        linecache.lazycache(filename, module.__dict__)
        exec(self.code, module.__dict__)


def dry_run() -> Plan:
    """What importing thunder would do, found without importing it."""
    spec = importlib.util.find_spec("thunder")
    if spec is None or not spec.origin:
        return Plan(state="not-installed", reason="thunder is not installed (no importable 'thunder' package)")
    jit_ext_file = Path(spec.origin).parent / "core" / "jit_ext.py"
    result = plan(jit_ext_file)
    result.state = config.READY.get(result.state, result.state)
    return result
