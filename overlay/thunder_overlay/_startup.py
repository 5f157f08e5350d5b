"""What the start-up hook (thunder_overlay.pth / thunder_overlay.start) calls at interpreter start.

Only ``os`` and ``sys`` are imported here: this runs in every Python process of the environment, so
everything costly waits until ``thunder.core.jit_ext`` is actually imported.
"""

import os
import sys

TARGET = "thunder.core.jit_ext"


def mode() -> str:
    """The overlay mode from THUNDER_OVERLAY: "off" (0), "strict", or "on" (unset, 1, anything else)."""
    value = os.environ.get("THUNDER_OVERLAY", "1").strip().lower()
    if value in ("0", "off", "false", "no"):
        return "off"
    if value == "strict":
        return "strict"
    return "on"


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
    sys.path twice."""
    if mode() == "off" or installed_finder() is not None:
        return
    sys.meta_path.insert(0, JitExtFinder())
