"""thunder-overlay: versioned patches that make thunder.jit name its trace proxies correctly.

Installing the distribution is all a user does: its start-up hook installs a finder that patches every
file of thunder the series changes (``thunder.core.jit_ext``, ...) when thunder imports it. This module is
imported by that hook, so it imports nothing costly at top level.
"""

import os
import sys

from thunder_overlay.config import __version__

__all__ = ["__version__", "enable", "status", "check_trace", "check_traces", "TraceCheckError"]


def enable() -> dict:
    """Install the overlay's finder in this process (the start-up hook normally has) and return
    status(import_thunder=False).

    Where the start-up hook already installed the finder (a normal install), enable() does nothing and says
    nothing. A second call of enable() itself, THUNDER_OVERLAY=0, or a module the series changes already
    imported stock each give one warning (an OverlayWarning, never raised even under ``-W error``) and change
    nothing; the last raises ImportError under THUNDER_OVERLAY=strict.
    """
    global _enabled_here
    from thunder_overlay import _startup, config

    if config.mode() == "off":
        value = os.environ[config.SWITCH]
        config.warn(f"thunder-overlay: THUNDER_OVERLAY={value} switches the overlay off; enable() does nothing")
    elif _startup.installed_finder() is not None:
        if _enabled_here:
            config.warn("thunder-overlay: enable() was called again; the overlay is enabled already")
        _enabled_here = True
    elif imported := _imported_targets():
        message = (
            f"thunder-overlay: {imported[0]} was imported before the overlay was enabled "
            f"({sys.modules[imported[0]].__file__}); thunder stays stock in this process"
        )
        if config.mode() == "strict":
            raise ImportError(message)
        config.warn(message)
    else:
        _startup.activate()
        _enabled_here = True
    return status(import_thunder=False)


# Whether enable() was called in this process (its second call warns; the start-up hook's finder does not).
_enabled_here = False


def _imported_targets() -> list[str]:
    try:
        from thunder_overlay import engine
    except Exception:  # a broken engine: the finder reports it at the import of thunder
        return []
    return engine.imported_targets()


def status(*, import_thunder: bool = True) -> dict:
    """What ``thunder-overlay status`` prints, as a dict: ``state`` plus the fields the README lists.

    Imports thunder (through the overlay) when it is not imported yet, so the state is what thunder runs
    with: "patched", "patched-unverified", "refused", "disabled", "not-enabled", "stock-imported",
    "not-installed" or "import-failed" (``import_error`` then says why). With ``import_thunder=False``
    nothing is imported and the state says what an import would do ("ready", "ready-unverified", ...).
    """
    from thunder_overlay import _startup, config

    if _startup.engine_failure is not None:
        return _engine_failed_report(_startup.engine_failure)
    try:
        from thunder_overlay import engine
    except Exception as e:
        return _engine_failed_report(config.engine_failed(e))
    if config.mode() == "off":
        return engine.Plan(state="disabled", reason=f"{config.SWITCH}={os.environ[config.SWITCH]}").report()
    if engine.outcome is None and (imported := engine.imported_targets()):
        return engine.Plan(
            state="stock-imported",
            thunder_path=os.path.dirname(sys.modules[config.PACKAGE].__file__),
            reason=f"{', '.join(imported)} {'was' if len(imported) == 1 else 'were'} imported before the overlay's "
            "finder was installed",
        ).report()
    if engine.outcome is None and _startup.installed_finder() is None:
        return engine.Plan(state="not-enabled", reason="the overlay's finder is not installed (start-up hook not run?)").report()
    if engine.outcome is None and import_thunder:
        return _import_and_report()
    if engine.outcome is not None:
        return engine.outcome.report()
    return engine.dry_run(_startup.installed_finder()).report()


def _engine_failed_report(reason: str) -> dict:
    """A report for an engine that could not run: every field empty but the state and the reason."""
    from thunder_overlay import config

    empty = {name: list(v) if isinstance(v, tuple) else v for name, v in config.REPORT_FIELDS.items()}
    return {**empty, "state": "refused", "reason": reason}


def _import_and_report() -> dict:
    from thunder_overlay import config, thunder_import

    error = thunder_import.try_import(config.PACKAGE)
    report = status(import_thunder=False)
    if error is not None and report["state"] != "not-installed":
        report["import_error"] = thunder_import.explain(error)
        if report["state"] != "refused":  # a refusal under strict is the reason itself
            report["state"], report["reason"] = "import-failed", report["import_error"]
    return report


def check_trace(trace, compile_data=None):
    """Raise TraceCheckError when ``trace`` breaks I1 (metadata) or I2 (unique names); return a CheckReport
    (symbols re-run, symbols that compute no metadata). ``compile_data``: ``thunder.compile_data(jfn)``."""
    from thunder_overlay.checks import check_trace as check

    return check(trace, compile_data)


def check_traces(jfn, args=None, kwargs=None):
    """check_trace for every prologue, computation and backward trace of the last call of ``jfn``; returns
    the CheckReport of them all. Given the call's ``args`` (and ``kwargs``), also I10 against the program run
    eagerly on them, outside thunder."""
    from thunder_overlay.checks import check_traces as check

    return check(jfn, args, kwargs)


def __getattr__(name):
    if name == "TraceCheckError":
        from thunder_overlay.checks import TraceCheckError

        return TraceCheckError
    raise AttributeError(name)
