"""pytest plugin (`-p gatelib.plugin`) that the gate loads into every stock or overlay test run.

It writes one JSON line per event to the file named by $GATE_OUT:
    {"total": N}                                                   tests selected after every deselection
    {"id": nodeid, "outcome": ..., "when": ..., "secs": ..., "msg": ...}   one per test phase worth recording
    {"collect_error": nodeid, "reason": one line, "msg": tail}     a file or class that failed to collect
    {"collected": [test ids]}                                      with $GATE_LIST_IDS set (no xdist)
    {"meta": true, thunder, torch, python, jit_ext, overlay...}   at the end: which thunder and overlay the tests ran
    {"finished": exitstatus}                                       pytest ended by itself (not killed)
and narrows the selection: $GATE_SHARD="i/N" keeps the tests of shard i (a stable hash of the test id),
$GATE_IDS names a file of test ids (the part after the file name) to keep.
With pytest-xdist only the controller writes; workers apply the same deterministic selection.
"""

import json
import os
import platform
import sys

import pytest

from gatelib.outcomes import classify_report, collect_reason, shard_of, test_part

# What the plugin records, in the version the outcome store keys each unit by (gatelib/store.py): raise it when
# a change here could change a recorded outcome or reason (classification, selection, ids), so that no stored
# outcome of the older plugin is reused
PLUGIN_VERSION = "1"

_config = None


def _emit(rec):
    with open(os.environ["GATE_OUT"], "a") as f:
        f.write(json.dumps(rec) + "\n")


def _is_controller():
    return not hasattr(_config, "workerinput")  # xdist workers report to the controller, which records


def pytest_configure(config):
    global _config
    _config = config


def _meta():
    """Which thunder, torch and overlay this process ran, read from sys.modules at its end, so that a session that
    never imported thunder (the gate's own tests) does not pay for importing it. Under xdist the workers run the
    tests (the controller imports neither thunder nor torch), so a worker's record is the one written."""
    thunder, torch, je = (sys.modules.get(m) for m in ("thunder", "torch", "thunder.core.jit_ext"))
    overlay = None
    if je is not None and "thunder_overlay" in sys.modules:
        from gatelib.plan import overlay_fingerprint

        try:
            overlay = overlay_fingerprint()
        except Exception as e:  # the record must not break the session it describes
            overlay = {"error": f"{type(e).__name__}: {e}"}
    return {
        "meta": True,
        # plain str: torch's version is a str subclass that xdist cannot send from a worker
        "thunder": str(getattr(thunder, "__version__", "?")) if thunder else None,
        "thunder_file": getattr(thunder, "__file__", None),
        "torch": str(torch.__version__) if torch else None,
        "python": platform.python_version(),
        "pytest": pytest.__version__,
        "jit_ext": f"{je.__file__} via {type(je.__loader__).__module__}.{type(je.__loader__).__name__}" if je else None,
        "overlay_loaded": "thunder_overlay" in sys.modules,
        "process": _config.workerinput["workerid"] if hasattr(_config, "workerinput") else "main",
        "overlay": overlay,
    }


@pytest.hookimpl(trylast=True)  # after -k and thunder's own conftest
def pytest_collection_modifyitems(config, items):
    shard = os.environ.get("GATE_SHARD")
    ids_file = os.environ.get("GATE_IDS")
    wanted = set(open(ids_file).read().splitlines()) if ids_file else None
    keep, drop = [], []
    for item in items:
        part = test_part(item.nodeid)
        ok = (not shard or shard_of(part, int(shard.split("/")[1])) == int(shard.split("/")[0]))
        ok = ok and (wanted is None or part in wanted)
        (keep if ok else drop).append(item)
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep


def pytest_runtest_logreport(report):
    if not _is_controller():
        return
    outcome = classify_report(report)
    if outcome is None:
        return
    _emit({"id": report.nodeid, "outcome": outcome, "when": report.when, "secs": round(report.duration or 0, 2),
           "msg": _tail(report) if outcome != "passed" else ""})


def _tail(report, n=15):
    if isinstance(report.longrepr, tuple):  # skip: (path, lineno, "Skipped: reason")
        return report.longrepr[-1]
    text = str(report.longrepr or "")
    return "\n".join(text.rstrip().splitlines()[-n:])


def pytest_collection_finish(session):
    if _is_controller():  # without xdist
        _emit({"total": len(session.items)})
        if os.environ.get("GATE_LIST_IDS"):  # the gate's --collect-only: every selected id, for shard sizes
            _emit({"collected": [test_part(item.nodeid) for item in session.items]})


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_node_collection_finished(node, ids):
    if not getattr(_config, "_gate_total", None):
        _config._gate_total = True
        _emit({"total": len(ids)})


def pytest_collectreport(report):
    if report.failed and _is_controller():
        text = str(report.longrepr or "")
        _emit({"collect_error": report.nodeid, "reason": collect_reason(text),
               "msg": "\n".join(text.rstrip().splitlines()[-15:])})


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node, error):
    meta = getattr(node, "workeroutput", {}).get("gate_meta")
    if meta and not getattr(_config, "_gate_worker_meta", None):
        _config._gate_worker_meta = meta


def pytest_sessionfinish(session, exitstatus):
    if not _is_controller():  # an xdist worker imported what the tests ran; it goes to the controller at its end
        _config.workeroutput["gate_meta"] = _meta()
        return
    _emit(getattr(_config, "_gate_worker_meta", None) or _meta())
    _emit({"finished": int(exitstatus)})
