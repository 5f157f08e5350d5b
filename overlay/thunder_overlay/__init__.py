"""thunder-overlay: versioned patches that make thunder.jit name its trace proxies correctly.

Installing the distribution is all a user does: its start-up hook installs a finder that patches
``thunder.core.jit_ext`` when thunder imports it. This module is imported by that hook, so it imports
nothing costly at top level.
"""

import os
import sys

__version__ = "0.2.0"
__all__ = ["enable", "status", "check_trace", "check_traces", "TraceCheckError"]


def enable() -> dict:
    """Install the overlay's finder in this process (the start-up hook normally has) and return
    status(import_thunder=False).

    A second call, THUNDER_OVERLAY=0, or a thunder.core.jit_ext already imported stock each give one
    warning and change nothing (the last raises ImportError under THUNDER_OVERLAY=strict).
    """
    import warnings

    from thunder_overlay import _startup

    if _startup.mode() == "off":
        value = os.environ[_startup.SWITCH]
        warnings.warn(f"thunder-overlay: THUNDER_OVERLAY={value} switches the overlay off; enable() does nothing",
                      stacklevel=2)
    elif _startup.installed_finder() is not None:
        warnings.warn("thunder-overlay: already enabled (enable() was called again); nothing to do", stacklevel=2)
    elif _startup.TARGET in sys.modules:
        message = (
            f"thunder-overlay: {_startup.TARGET} was imported before the overlay was enabled "
            f"({sys.modules[_startup.TARGET].__file__}); it stays stock in this process"
        )
        if _startup.mode() == "strict":
            raise ImportError(message)
        warnings.warn(message, stacklevel=2)
    else:
        _startup.activate()
    return status(import_thunder=False)


def status(*, import_thunder: bool = True) -> dict:
    """What ``thunder-overlay status`` prints, as a dict: ``state`` plus the fields the README lists.

    Imports thunder (through the overlay) when it is not imported yet, so the state is what thunder runs
    with: "patched", "patched-unverified", "refused", "disabled", "not-enabled", "stock-imported",
    "not-installed" or "import-failed" (``import_error`` then says why). With ``import_thunder=False``
    nothing is imported and the state says what an import would do ("ready", "ready-unverified", ...).
    """
    from thunder_overlay import _startup, finder

    if _startup.mode() == "off":
        return finder.Plan(state="disabled", reason=f"{_startup.SWITCH}={os.environ[_startup.SWITCH]}").report()
    if finder.outcome is None and _startup.TARGET in sys.modules:
        return finder.Plan(
            state="stock-imported",
            thunder_path=sys.modules[_startup.TARGET].__file__,
            reason=f"{_startup.TARGET} was imported before the overlay's finder was installed",
        ).report()
    if finder.outcome is None and _startup.installed_finder() is None:
        return finder.Plan(state="not-enabled", reason="the overlay's finder is not installed (start-up hook not run?)").report()
    if finder.outcome is None and import_thunder:
        return _import_and_report()
    return finder.outcome.report() if finder.outcome is not None else finder.dry_run().report()


def _import_and_report() -> dict:
    from thunder_overlay import _startup, thunder_import

    error = thunder_import.try_import("thunder")
    if error is None and _startup.TARGET not in sys.modules:
        error = thunder_import.try_import(_startup.TARGET)
    report = status(import_thunder=False)
    if error is not None and report["state"] != "not-installed":
        report["import_error"] = thunder_import.explain(error)
        if report["state"] != "refused":  # a refusal under strict is the reason itself
            report["state"], report["reason"] = "import-failed", report["import_error"]
    return report


def check_trace(trace) -> None:
    from thunder_overlay.checks import check_trace as check

    check(trace)


def check_traces(jfn) -> int:
    from thunder_overlay.checks import check_traces as check

    return check(jfn)


def __getattr__(name):
    if name == "TraceCheckError":
        from thunder_overlay.checks import TraceCheckError

        return TraceCheckError
    raise AttributeError(name)
