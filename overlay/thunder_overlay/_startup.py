"""What the start-up hook (thunder_overlay.pth / thunder_overlay.start) calls at interpreter start.

Only ``os``, ``sys`` and the leaf ``config`` are imported here: this runs in every Python process of the
environment, so everything costly waits until thunder is actually imported.
"""

import os
import sys

from thunder_overlay import config

# Why the engine itself failed in this process (it could not be imported, or raised), if it did.
engine_failure: str | None = None


# The meta-path finder for the modules of thunder that the patch series changes.
#
# CPython calls ``find_spec`` with the global import lock held: code run there that imports a module another
# thread is importing deadlocks (that thread waits for the global lock to find its submodules). So
# ``find_spec`` never decides. Until the decision is made it answers None at once for every module outside
# the thunder package, and for a module of thunder it returns the spec the other finders give, with a loader
# that decides first (``_deciding.DecidingLoader``): in ``exec_module``, which runs under that module's lock
# only. The decision (the engine's, once per process, for every file the series changes: the manifest says
# which) is made at the first import of thunder; from then on ``find_spec`` answers None at once for every
# module but the patched ones, whose specs the decision made. Comments, not docstrings, here: this module is
# loaded by every Python process of the environment, and docstrings are part of its bytecode.
class ThunderFinder:
    def __init__(self):
        self.targets: frozenset | None = None  # known once the engine has decided

    def find_spec(self, fullname, path=None, target=None):
        if self.targets is not None:
            if fullname not in self.targets:
                return None
            return sys.modules["thunder_overlay.engine"].outcome.specs[fullname]
        if fullname != config.PACKAGE and not fullname.startswith(config.PACKAGE + "."):
            return None
        for finder in sys.meta_path:  # what the import system does next, without this finder
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(fullname, path, target)
            if spec is not None:
                if spec.loader is not None and hasattr(spec.loader, "exec_module"):
                    # a leaf that imports nothing: safe under the global import lock (no other thread can
                    # hold its module lock, since only this finder imports it)
                    from thunder_overlay._deciding import DecidingLoader

                    spec.loader = DecidingLoader(self, spec.loader)
                return spec
        return None  # no thunder at all: its import fails as without the overlay

    # The engine's decision, made once; the patched spec of ``fullname`` if the series changes it, else None.
    # The boundary between `import thunder` and the overlay: whatever goes wrong beyond it (a refusal, or a
    # fault of the engine itself) lets stock thunder load with one warning, unless strict.
    def decide(self, fullname: str):
        global engine_failure
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
            return spec
        if config.mode() == "strict":  # every later import of thunder fails alike
            raise ImportError(
                f"thunder-overlay: importing {fullname} fails because THUNDER_OVERLAY=strict and the overlay "
                f"cannot patch thunder: {reason}. Unset THUNDER_OVERLAY to run stock thunder with a warning instead.",
                name=fullname,
            )
        self.targets = frozenset()
        config.warn(f"thunder-overlay: not patching thunder, stock thunder runs. {reason}")
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
