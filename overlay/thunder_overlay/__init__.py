"""thunder-overlay: versioned patches that make thunder.jit name its trace proxies correctly.

Installing the distribution is all a user does: its start-up hook installs a finder that patches
``thunder.core.jit_ext`` when thunder imports it. This module is imported by that hook, so it imports
nothing costly at top level.
"""

import sys

__all__ = ["enable", "status", "check_trace", "check_traces", "TraceCheckError"]


def enable() -> dict:
    """Install the overlay's finder in this process (the start-up hook normally has) and return status().

    A second call, THUNDER_OVERLAY=0, or a thunder.core.jit_ext already imported stock each give one
    warning and change nothing (the last raises ImportError under THUNDER_OVERLAY=strict).
    """
    import warnings

    from thunder_overlay import _startup

    if _startup.mode() == "off":
        warnings.warn("thunder-overlay: THUNDER_OVERLAY=0 switches the overlay off; enable() does nothing", stacklevel=2)
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
    return status()


def status() -> dict:
    """A structured report: state, thunder version and path, base sha256, known or not, patches applied,
    and the reason when none were. state is one of "patched" (jit_ext was imported patched), "ready"
    (not imported yet; the series applies), "refused", "disabled", "not-enabled" and "stock-imported"."""
    from thunder_overlay import _startup, finder

    if _startup.mode() == "off":
        return finder.Plan(state="disabled", reason="THUNDER_OVERLAY=0").report()
    if finder.outcome is not None:
        return finder.outcome.report()
    if _startup.TARGET in sys.modules:
        return finder.Plan(
            state="stock-imported",
            thunder_path=sys.modules[_startup.TARGET].__file__,
            reason=f"{_startup.TARGET} was imported before the overlay's finder was installed",
        ).report()
    return finder.dry_run(enabled=_startup.installed_finder() is not None).report()


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
