"""The overlay's constants, its switches and its one way to warn.

A leaf: it imports only ``os`` and ``sys``, so the start-up hook, the engine and the cache can all read it
without importing each other.
"""

import os
import sys

__version__ = "0.4.0"

PACKAGE = "thunder"  # the package whose files the series change (which files: patches/manifest.toml)
SWITCH = "THUNDER_OVERLAY"
PATCHES_ENV = "THUNDER_OVERLAY_PATCHES"
BASE_ENV = "THUNDER_OVERLAY_BASE"
MANIFEST = "manifest.toml"
# How long each side of `thunder-overlay names` may run by default (--timeout): the corpus takes minutes
NAMES_TIMEOUT_S = 1800

# The series ship inside the package: a link to the top-level patches/ in a checkout, a folder in the wheel.
_PACKAGED_PATCHES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "patches")

# Every accepted THUNDER_OVERLAY value (case-insensitive) and the mode it selects; the README lists them.
MODES = {
    "": "on", "1": "on", "on": "on", "true": "on", "yes": "on",
    "0": "off", "off": "off", "false": "off", "no": "off",
    "strict": "strict",
}

# The states that mean thunder runs the series: from a known base, or from the series THUNDER_OVERLAY_BASE
# names. A dry run (status without importing thunder) says "ready" for "patched": READY[state]. The engine,
# the CLI, `names`, `verify` and the tests read them here; the README describes each state.
PATCHED_STATES = ("patched", "patched-unverified")
READY = {"patched": "ready", "patched-unverified": "ready-unverified"}
READY_STATES = tuple(READY.values())

# Every field of a status report, in order, with its empty value (the README describes each); here, not in
# the engine, so that a report can be made when the engine itself cannot be imported.
REPORT_FIELDS = {
    "state": None,
    "overlay_version": __version__,
    "reason": None,
    "thunder_version": None,  # what the distribution metadata says, if there is any
    "install": None,
    "thunder_path": None,
    "files": (),  # per file the series changes: module, path, sha256, base_sha256, matches_base, imported, patched
    "known": False,  # every file has the bytes of a base of the manifest
    "base": None,  # the series applied (or that would be)
    "base_releases": (),
    "base_switch": None,
    "patches_dir": None,
    "patches_override": False,
    "series_dir": None,
    "patches": (),
    "bytecode_cache": None,
    "import_error": None,
}

_printed: set = set()


def _user_stacklevel() -> int:
    """The stacklevel of the first frame above ``warn``'s caller that is none of the overlay's, thunder's
    (being imported) or the import system's."""
    thunder = getattr(sys.modules.get("thunder"), "__file__", None)
    skipped = tuple(os.path.dirname(f) + os.sep for f in (__file__, thunder) if f)
    frame, level = sys._getframe(2), 2
    while frame is not None:
        name = frame.f_code.co_filename
        if "importlib" in name and "_bootstrap" in name:  # warnings.warn does not count these frames either
            frame = frame.f_back
            continue
        if not (name.startswith(skipped) or os.path.basename(os.path.dirname(name)) == "importlib"):
            return level
        frame, level = frame.f_back, level + 1
    return level


class OverlayWarning(UserWarning):
    """Every warning the overlay gives (a refusal, an unknown switch value, ...)."""


class OverlayRefusal(Exception):
    """Why the overlay leaves thunder stock: unknown file, edited file, broken patch ..."""


def patched_filename(origin: str) -> str:
    """The filename patched code carries (tracebacks, linecache); the module's ``__file__`` stays ``origin``."""
    return f"{origin} (patched by thunder-overlay)"


def switch_value() -> str:
    return os.environ.get(SWITCH, "1").strip().lower()


def mode() -> str:
    """"off", "strict" or "on" from THUNDER_OVERLAY; an unknown value means "on" (activate() warns)."""
    return MODES.get(switch_value(), "on")


def accepted_values() -> str:
    return ", ".join(repr(v) for v in MODES if v)


def patches_dir() -> tuple[str, bool]:
    """The directory holding manifest.toml and the series, and whether THUNDER_OVERLAY_PATCHES chose it.
    Everything that reads the series (engine, tools, tests) finds it here."""
    override = os.environ.get(PATCHES_ENV)
    return (override, True) if override else (_PACKAGED_PATCHES, False)


def unknown_value(variable: str, value: str | None, accepted: str, consequence: str) -> str:
    """The warning for a value of ``variable`` the overlay does not know (the cache's, the base's)."""
    return f"thunder-overlay: unknown {variable}={value!r}; accepted values: {accepted}. {consequence}"


def engine_failed(error: BaseException) -> str:
    """The reason given when the overlay's own engine could not be imported or raised."""
    return f"the overlay's engine failed: {type(error).__name__}: {error}"


def warn(message: str, stacklevel: int | None = None) -> None:
    """Warn without ever raising: under warnings-as-errors (``-W error``, pytest's ``filterwarnings =
    error``) the warning would become an exception out of ``import thunder``, which stock thunder does
    not raise; the message is then printed to stderr, once per process. The warning points at the user's
    line (``import thunder``, ``enable()``), past the overlay's, thunder's and the import system's frames."""
    import warnings

    try:
        warnings.warn(message, OverlayWarning, stacklevel=stacklevel or _user_stacklevel())
    except Exception:
        if message not in _printed:
            _printed.add(message)
            print(f"{message} [printed, not raised: warnings are errors in this process]", file=sys.stderr)
