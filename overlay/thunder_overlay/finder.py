"""Patch thunder.core.jit_ext as it is imported.

The start-up finder hands the import of ``thunder.core.jit_ext`` to :func:`find_patched_spec`. It finds
the upstream file the way the import system would, verifies the installed release and the file's sha256
against the manifest, applies that base's series in memory and returns a spec whose loader executes the
patched text. The file on disk is never written. Every refusal leaves the import to the regular finders,
so stock thunder loads (with one warning), or raises ImportError under THUNDER_OVERLAY=strict.
"""

from __future__ import annotations

import hashlib
import importlib.abc
import importlib.machinery
import importlib.util
import linecache
import os
import sys
import warnings
from dataclasses import asdict, dataclass, field
from pathlib import Path

from thunder_overlay import _startup, manifest
from thunder_overlay.patchset import PatchError, apply_series, read_series

PATCHES_ENV = "THUNDER_OVERLAY_PATCHES"


class OverlayRefusal(Exception):
    """Why the overlay leaves thunder stock: unknown release, edited file, broken patch ..."""


class OverlayWarning(UserWarning):
    pass


@dataclass
class Plan:
    """What the overlay does (or did) to the installed thunder; ``status()`` reports it."""

    state: str  # "patched", "refused", "disabled", "not-imported", "stock-imported"
    thunder_version: str | None = None
    thunder_path: str | None = None
    base_sha256: str | None = None
    known: bool = False
    patches_dir: str | None = None
    patches_override: bool = False
    patches: list[str] = field(default_factory=list)
    reason: str | None = None
    patched_text: str | None = field(default=None, repr=False)

    def report(self) -> dict:
        report = asdict(self)
        del report["patched_text"]
        return report


# The outcome of the one real import of thunder.core.jit_ext in this process.
outcome: Plan | None = None


def patches_dir() -> tuple[Path, bool]:
    override = os.environ.get(PATCHES_ENV)
    return (Path(override), True) if override else (manifest.PATCHES_DIR, False)


def _upstream_spec(finder, fullname: str, path) -> importlib.machinery.ModuleSpec | None:
    for other in sys.meta_path:
        if other is finder or not hasattr(other, "find_spec"):
            continue
        spec = other.find_spec(fullname, path)
        if spec is not None:
            return spec
    return None


def _thunder_release(jit_ext_file: Path) -> str | None:
    """The version of the lightning-thunder distribution installed beside this very file (read from its
    dist-info directly: importlib.metadata would scan every distribution on the path)."""
    for dist_info in sorted(jit_ext_file.parents[2].glob("lightning_thunder-*.dist-info")):
        metadata = dist_info / "METADATA"
        if metadata.is_file():
            for line in metadata.read_text(encoding="utf-8").splitlines():
                if line.startswith("Version:"):
                    return line.split(":", 1)[1].strip()
                if not line:
                    break
    return None


def plan(jit_ext_file: Path) -> Plan:
    """Verify ``jit_ext_file`` against the manifest and patch its text in memory; never raises."""
    directory, override = patches_dir()
    result = Plan(
        state="refused", thunder_path=str(jit_ext_file.parents[1]), patches_dir=str(directory), patches_override=override
    )
    try:
        source = jit_ext_file.read_bytes()
        result.base_sha256 = hashlib.sha256(source).hexdigest()
        result.thunder_version = _thunder_release(jit_ext_file)
        bases = manifest.load(directory)
        if result.thunder_version is None:
            raise OverlayRefusal(f"no lightning-thunder distribution metadata beside {jit_ext_file}")
        base = manifest.base_for(bases, result.thunder_version)
        if base is None:
            supported = ", ".join(manifest.supported_releases(bases))
            raise OverlayRefusal(
                f"thunder {result.thunder_version} has no patch set (supported releases: {supported})"
            )
        if base.sha256 != result.base_sha256:
            raise OverlayRefusal(
                f"{jit_ext_file} of thunder {result.thunder_version} has sha256 {result.base_sha256}, "
                f"but the release ships {base.sha256}: the installed file was edited locally"
            )
        result.known = True
        patches = read_series(base.directory)
        result.patched_text = apply_series(source.decode("utf-8"), patches, manifest.TARGET_PATH)
        result.patches = [Path(p.name).name for p in patches]
        result.state = "patched"
    except (OverlayRefusal, PatchError, OSError, KeyError, ValueError) as e:
        result.reason = f"{type(e).__name__}: {e}" if not isinstance(e, OverlayRefusal) else str(e)
    return result


def refusal_message(p: Plan) -> str:
    return f"thunder-overlay: not patching thunder.core.jit_ext, stock thunder runs. {p.reason}"


def find_patched_spec(finder, fullname: str, path) -> importlib.machinery.ModuleSpec | None:
    global outcome
    spec = _upstream_spec(finder, fullname, path)
    if spec is None or not spec.origin or not spec.origin.endswith(".py"):
        return None  # no thunder, or not a source install: nothing the overlay knows how to patch
    outcome = plan(Path(spec.origin))
    if outcome.state != "patched":
        if _startup.mode() == "strict":
            raise ImportError(refusal_message(outcome) + " (THUNDER_OVERLAY=strict)", name=fullname)
        warnings.warn(refusal_message(outcome), OverlayWarning, stacklevel=2)
        return None
    loader = PatchedSourceLoader(fullname, spec.origin, outcome.patched_text)
    patched = importlib.util.spec_from_loader(fullname, loader, origin=spec.origin)
    patched.has_location = True
    return patched


def patched_filename(origin: str) -> str:
    return f"{origin} (patched by thunder-overlay)"


class PatchedSourceLoader(importlib.abc.Loader):
    """Executes the patched text as the module. ``__file__`` and the code's filename say the module is
    patched (``__spec__.origin`` stays the real file), and linecache holds the patched lines under that
    name, so tracebacks and inspect.getsource show what runs."""

    def __init__(self, fullname: str, origin: str, text: str):
        self.fullname, self.origin, self.text = fullname, origin, text

    def get_source(self, fullname: str) -> str:
        return self.text

    def exec_module(self, module) -> None:
        filename = patched_filename(self.origin)
        linecache.cache[filename] = (len(self.text), None, self.text.splitlines(keepends=True), filename)
        module.__file__ = filename
        exec(compile(self.text, filename, "exec", dont_inherit=True), module.__dict__)


def dry_run(*, enabled: bool) -> Plan:
    """What importing thunder would do, found without importing it."""
    if not enabled:
        return Plan(state="not-enabled", reason="the overlay's finder is not installed (start-up hook not run?)")
    spec = importlib.machinery.PathFinder.find_spec("thunder")
    if spec is None or not spec.origin:
        return Plan(state="refused", reason="thunder is not installed (no importable 'thunder' package)")
    result = plan(Path(spec.origin).parent / "core" / "jit_ext.py")
    if result.state == "patched":
        result.state = "ready"
    return result
