"""What the start-up hook (thunder_overlay.pth / thunder_overlay.start) calls at interpreter start.

Only ``os``, ``sys`` and the leaf ``config`` are imported here: this runs in every Python process of the
environment, so everything costly waits until thunder is actually imported.
"""

import os
import sys

from thunder_overlay import config

# Why the engine itself failed in this process (it could not be imported, or raised), if it did.
engine_failure: str | None = None


class ThunderFinder:
    """Meta-path finder for the modules of thunder that the patch series changes.

    Until thunder is first imported it answers ``None`` at once for every module outside the thunder
    package. That first import hands the decision to the engine, once, for every file the series changes
    (which files: the manifest); from then on it answers ``None`` at once for every module but those.
    """

    def __init__(self):
        self.targets: frozenset | None = None  # known once the engine has decided

    def find_spec(self, fullname, path=None, target=None):
        if self.targets is not None:
            if fullname not in self.targets:
                return None
        elif fullname != config.PACKAGE and not fullname.startswith(config.PACKAGE + "."):
            return None
        global engine_failure
        # The boundary between `import thunder` and the overlay: whatever goes wrong beyond it (a refusal,
        # or a fault of the engine itself) lets stock thunder load with one warning, unless strict.
        try:
            from thunder_overlay import engine

            outcome = engine.decide(self)
            reason = outcome.reason if outcome is not None else None
            spec = outcome.specs.get(fullname) if outcome is not None else None
        except Exception as e:
            outcome, spec, reason = None, None, config.engine_failed(e)
            engine_failure = reason
        if reason is None:
            if outcome is not None:
                self.targets = frozenset(outcome.specs)
            return spec  # patched, not a target, or no thunder at all (its import then fails as without us)
        if config.mode() == "strict":  # every later import of thunder fails alike
            raise ImportError(
                f"thunder-overlay: importing {fullname} fails because THUNDER_OVERLAY=strict and the overlay "
                f"cannot patch thunder: {reason}. Unset THUNDER_OVERLAY to run stock thunder with a warning instead.",
                name=fullname,
            )
        self.targets = frozenset()
        # stacklevel 2: the module importing thunder (the warnings module skips importlib's own frames)
        config.warn(f"thunder-overlay: not patching thunder, stock thunder runs. {reason}", stacklevel=2)
        return None


def installed_finder():
    for finder in sys.meta_path:
        if type(finder).__name__ == "ThunderFinder" and type(finder).__module__ == __name__:
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
    sys.meta_path.insert(0, ThunderFinder())
