"""Test ids, outcomes, and the stock-vs-overlay comparison. Imports nothing of pytest or thunder."""

import hashlib
import json
import re
from collections import Counter
from pathlib import Path

OUTCOMES = ["passed", "failed", "error", "timeout", "crashed", "skipped", "xfailed", "xpassed"]
BAD = {"failed", "error", "timeout", "crashed", "missing"}
# when one test reports several phases (setup, call, teardown), the worst of these wins
_SEVERITY = {"crashed": 3, "timeout": 2, "error": 1}
TIMEOUT_MARK = "from pytest-timeout"  # pytest-timeout's failure message: "Timeout (>Ns) from pytest-timeout."
OK_EXIT = (0, 1, 5)  # all passed, some failed, nothing selected
COLLECTION_EXIT = 2  # interrupted: with collection errors, the expected end of a module that does not collect


def ordinary_exit(returncode, collect_errors):
    """Whether pytest's exit status is one a run's outcomes can be trusted with."""
    return returncode in OK_EXIT or (returncode == COLLECTION_EXIT and bool(collect_errors))


def test_part(nodeid):
    """'<any path>/test_core.py::test_x[cpu]' -> 'test_x[cpu]': the same under --pyargs and a file path."""
    return nodeid.partition("::")[2]


def norm_id(module, nodeid):
    """The gate's test id: 'distributed.test_ops', '.../test_ops.py::test_x' -> 'distributed/test_ops.py::test_x'."""
    return f"{module.replace('.', '/')}.py::{test_part(nodeid)}"


def collection_id(module, part):
    """The gate's id of a collection error: 'test_x.py::<collection>', 'test_x.py::TestClass::<collection>'."""
    return norm_id(module, "::" + (part + "::" if part else "") + "<collection>")


def shard_of(part, n):
    """Shard (1..n) of a test: a hash of its id, so stock and overlay agree even if they collect differently."""
    return int(hashlib.sha1(part.encode()).hexdigest(), 16) % n + 1


def classify_report(report):
    """A pytest TestReport -> the outcome to record, or None for a phase that says nothing (a passed setup)."""
    xfail = hasattr(report, "wasxfail")
    if report.when == "call":
        if report.passed:
            return "xpassed" if xfail else "passed"
        if report.skipped:
            return "xfailed" if xfail else "skipped"
    elif report.passed:
        return None
    elif report.skipped:  # skipped/xfailed in setup (skip marks, skipif, xfail(run=False))
        return "xfailed" if xfail else "skipped"
    if report.when not in ("setup", "call", "teardown"):  # pytest-xdist's report for a test that killed a worker
        return "crashed"
    if TIMEOUT_MARK in _crash_message(report):
        return "timeout"
    return "failed" if report.when == "call" else "error"  # setup/teardown failure: error


def _crash_message(report):
    crash = getattr(report.longrepr, "reprcrash", None)
    if crash is not None:
        return crash.message
    return str(report.longrepr or "")[-500:]


def collect_reason(text):
    """One line saying why a file failed to collect: the last 'E   ...' line of a traceback, or the whole
    message folded onto one line (pytest's parametrize errors span several short lines)."""
    errors = [line[1:].strip() for line in text.splitlines() if line.startswith("E ")]
    reason = errors[-1] if errors else " ".join(text.split())
    return reason if len(reason) <= 300 else reason[:297] + "..."


def read_run(module, path):
    """Reads one run's JSON lines. Returns a dict: header (what the driver wrote), meta (what the plugin saw),
    total, results {test id: record}, collect_errors {part after the file name: record}, collected (test parts,
    --collect-only), finished (pytest's exit status or None), trailer (the driver's last line, with returncode)."""
    run = {"header": {}, "meta": {}, "total": None, "results": {}, "collect_errors": {}, "finished": None,
           "trailer": None, "collected": None}
    lines = Path(path).read_text().splitlines() if Path(path).exists() else []
    for line in lines:
        try:
            rec = json.loads(line)
        except ValueError:  # a line being written
            continue
        if "outcome" in rec:
            tid = norm_id(module, rec["id"])
            old = run["results"].get(tid)
            if old is None or _SEVERITY.get(rec["outcome"], 0) > _SEVERITY.get(old["outcome"], 0):
                run["results"][tid] = rec
        elif "collect_error" in rec:  # keyed by what follows the file name ('' for the file itself)
            run["collect_errors"][test_part(rec["collect_error"])] = rec
        elif rec.get("meta"):
            run["meta"] = rec
        elif "total" in rec:
            run["total"] = rec["total"]
        elif "collected" in rec:
            run["collected"] = rec["collected"]
        elif "finished" in rec:
            run["finished"] = rec["finished"]
        elif "complete" in rec:
            run["trailer"] = rec
        else:
            run["header"].update(rec)
    return run


def counts(results):
    c = Counter(r["outcome"] for r in results.values())
    return {o: c[o] for o in OUTCOMES}


def collect_status(run_or_side):
    """'ok', 'not collectable' (errors, no test ran) or 'partial' (errors, some tests ran)."""
    if not run_or_side["collect_errors"]:
        return "ok"
    return "partial" if run_or_side["results"] else "not collectable"


def outcome_of(results, tid):
    return results.get(tid, {}).get("outcome", "missing")


def compare(module, stock, overlay, allow):
    """Stock vs overlay side of one module (each {results, collect_errors}). Returns a dict of entry lists:
    regressions (pass -> failed/error/timeout/crashed/missing, and a collection error overlay has and stock
    has not), allowlisted, improvements, other_changes; and 'identical', the number of test ids with one
    outcome on both sides. Regressions are not yet confirmed (see confirm())."""
    found = {"regressions": [], "allowlisted": [], "improvements": [], "other_changes": [], "identical": 0}

    def add(key, entry):
        if entry["id"] in allow:  # an explained difference keeps its reason; an explained regression is no failure
            entry["why"] = allow[entry["id"]]
            key = "allowlisted" if key == "regressions" else key
        found[key].append(entry)

    for part in sorted(stock["collect_errors"].keys() ^ overlay["collect_errors"].keys()):
        entry = {"module": module, "id": collection_id(module, part),
                 "stock": "collection error" if part in stock["collect_errors"] else "collected",
                 "overlay": "collection error" if part in overlay["collect_errors"] else "collected"}
        entry["msg"] = (overlay["collect_errors"].get(part) or stock["collect_errors"][part])["reason"]
        add("regressions" if entry["overlay"] == "collection error" else "improvements", entry)
    # a side that collected nothing because of a collection error: its tests are all 'missing', and that is
    # the one collection regression above, not thousands of test regressions
    skip_missing = {side for side, s in (("stock", stock), ("overlay", overlay))
                    if collect_status(s) == "not collectable"}
    st, ov = stock["results"], overlay["results"]
    for tid in sorted(st.keys() | ov.keys()):
        a, b = outcome_of(st, tid), outcome_of(ov, tid)
        if a == b:
            found["identical"] += 1
            continue
        if (a == "missing" and "stock" in skip_missing) or (b == "missing" and "overlay" in skip_missing):
            continue
        entry = {"module": module, "id": tid, "stock": a, "overlay": b,
                 "msg": ov.get(tid, {}).get("msg") or st.get(tid, {}).get("msg", "")}
        if a == "passed" and b in BAD:
            add("regressions", entry)
        elif a in BAD and b == "passed":
            add("improvements", entry)
        else:
            add("other_changes", entry)
    return found


def confirm(regressions, stock_again, overlay_again):
    """Splits regressions by a rerun of those tests on both sides: still passed -> bad is a regression,
    anything else is flaky. Each entry gets 'rerun': 'stock outcome -> overlay outcome'."""
    kept, flaky = [], []
    for e in regressions:
        if e["id"].endswith("::<collection>"):  # a collection error is not a test to rerun
            kept.append(e)
            continue
        a, b = outcome_of(stock_again, e["id"]), outcome_of(overlay_again, e["id"])
        e["rerun"] = f"{a} -> {b}"
        (kept if a == "passed" and b in BAD else flaky).append(e)
    return kept, flaky


def load_allowlist(path):
    """'test_id  # why' per line; a line without a reason is refused (ValueError naming the line)."""
    allow = {}
    for n, line in enumerate(Path(path).read_text().splitlines(), 1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        tid, _, why = line.partition("#")
        if not why.strip():
            raise ValueError(f"{path}:{n}: entry without a reason ('test_id  # why'): {line.strip()}")
        allow[tid.strip()] = why.strip()
    return allow


def ids_digest(ids):
    return hashlib.sha1("\n".join(sorted(ids)).encode()).hexdigest()[:8]


def parts_of(ids):
    """Gate ids -> the test parts the plugin's $GATE_IDS filter matches."""
    return sorted({re.sub(r"^[^:]*\.py::", "", tid) for tid in ids})
