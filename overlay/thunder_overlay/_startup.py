"""What the start-up hook (thunder_overlay.pth / thunder_overlay.start) calls at interpreter start.

Only ``os`` and ``sys`` are imported here: this runs in every Python process of the environment, so
everything costly waits until ``thunder.core.jit_ext`` is actually imported.
"""

import os
import sys

TARGET = "thunder.core.jit_ext"
SWITCH = "THUNDER_OVERLAY"
# Where the series live: inside the package (a link in a checkout, a folder in the wheel). Named here
# because this module is loaded at start-up: a patched import from the bytecode cache needs no other.
PATCHES_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "patches")
MANIFEST = "manifest.toml"

# Every accepted THUNDER_OVERLAY value (case-insensitive) and the mode it selects; the README lists them.
MODES = {
    "": "on", "1": "on", "on": "on", "true": "on", "yes": "on",
    "0": "off", "off": "off", "false": "off", "no": "off",
    "strict": "strict",
}

_printed: set = set()


class OverlayWarning(UserWarning):
    """Every warning the overlay gives (a refusal, an unknown switch value, ...)."""


def _switch_value() -> str:
    return os.environ.get(SWITCH, "1").strip().lower()


def mode() -> str:
    """"off", "strict" or "on" from THUNDER_OVERLAY; an unknown value means "on" (activate() warns)."""
    return MODES.get(_switch_value(), "on")


def accepted_values() -> str:
    return ", ".join(repr(v) for v in MODES if v)


def warn(message: str, stacklevel: int = 2) -> None:
    """Warn without ever raising: under warnings-as-errors (``-W error``, pytest's ``filterwarnings =
    error``) the warning would become an exception out of ``import thunder``, which stock thunder does
    not raise; the message is then printed to stderr, once per process."""
    import warnings

    try:
        warnings.warn(message, OverlayWarning, stacklevel=stacklevel + 1)
    except Exception:
        if message not in _printed:
            _printed.add(message)
            print(f"{message} [printed, not raised: warnings are errors in this process]", file=sys.stderr)


class JitExtFinder:
    """Meta-path finder that answers for thunder.core.jit_ext only.

    Every other import gets ``None`` at once, so the finder costs nothing elsewhere; the patch engine is
    imported the first time thunder imports jit_ext.
    """

    def find_spec(self, fullname, path=None, target=None):
        if fullname != TARGET:
            return None
        from thunder_overlay.finder import find_patched_spec

        return find_patched_spec(self, fullname, path)


def installed_finder():
    for finder in sys.meta_path:
        if type(finder).__name__ == "JitExtFinder" and type(finder).__module__ == __name__:
            return finder
    return None


def activate() -> None:
    """Install the finder unless switched off. Idempotent: a .pth may run twice when its directory is on
    sys.path twice, and the warning about an unknown THUNDER_OVERLAY value comes once."""
    if mode() == "off" or installed_finder() is not None:
        return
    if _switch_value() not in MODES:
        warn(
            f"thunder-overlay: unknown {SWITCH}={os.environ[SWITCH]!r}; accepted values: {accepted_values()} "
            "(unset means on). The overlay stays on."
        )
    sys.meta_path.insert(0, JitExtFinder())
