"""What the start-up hook (thunder_overlay.pth / thunder_overlay.start) calls at interpreter start.

Only ``os``, ``sys`` and the leaf ``config`` are imported here: this runs in every Python process of the
environment, so everything costly waits until ``thunder.core.jit_ext`` is actually imported.
"""

import os
import sys

from thunder_overlay import config

# Why the engine itself failed in this process (it could not be imported, or raised), if it did.
engine_failure: str | None = None


class JitExtFinder:
    """Meta-path finder that answers for thunder.core.jit_ext only.

    Every other import gets ``None`` at once, so the finder costs nothing elsewhere; the patch engine is
    imported the first time thunder imports jit_ext.
    """

    def find_spec(self, fullname, path=None, target=None):
        if fullname != config.TARGET:
            return None
        global engine_failure
        # The boundary between `import thunder` and the overlay: whatever goes wrong beyond it (a refusal,
        # or a fault of the engine itself) lets stock thunder load with one warning, unless strict.
        try:
            from thunder_overlay import engine

            spec = engine.find_patched_spec(self, fullname, path)
            reason = engine.outcome.reason if spec is None and engine.outcome is not None else None
        except Exception as e:
            spec, reason = None, config.engine_failed(e)
            engine_failure = reason
        if reason is None:
            return spec  # patched, or no thunder at all (the import then fails as it would without us)
        if config.mode() == "strict":
            raise ImportError(
                f"thunder-overlay: importing {fullname} fails because THUNDER_OVERLAY=strict and the overlay "
                f"cannot patch it: {reason}. Unset THUNDER_OVERLAY to run stock thunder with a warning instead.",
                name=fullname,
            )
        # stacklevel 2: the module importing jit_ext (the warnings module skips importlib's own frames)
        config.warn(f"thunder-overlay: not patching {fullname}, stock thunder runs. {reason}", stacklevel=2)
        return None


def installed_finder():
    for finder in sys.meta_path:
        if type(finder).__name__ == "JitExtFinder" and type(finder).__module__ == __name__:
            return finder
    return None


def activate() -> None:
    """Install the finder unless switched off. Idempotent: a .pth may run twice when its directory is on
    sys.path twice, and the warning about an unknown THUNDER_OVERLAY value comes once."""
    if config.mode() == "off" or installed_finder() is not None:
        return
    if config.switch_value() not in config.MODES:
        config.warn(
            f"thunder-overlay: unknown {config.SWITCH}={os.environ[config.SWITCH]!r}; accepted values: "
            f"{config.accepted_values()} (unset means on). The overlay stays on."
        )
    sys.meta_path.insert(0, JitExtFinder())
