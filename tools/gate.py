"""Regression gate: run thunder's own test modules on CPU under stock thunder and under the overlay.

Each module runs twice, in subprocesses (pytest + pytest-xdist), first with THUNDER_OVERLAY=0 (stock),
then with THUNDER_OVERLAY=1 (overlay). Outcomes are compared per test id. A test that passes stock and
fails, errors or goes missing with the overlay is a regression and fails the gate (exit 1), unless it
is listed in tools/gate-allowlist.txt. Tests going from failed/error to passed are improvements.

Usage (run with the Python that has thunder, torch, pytest, pytest-xdist):
    .venv/bin/python tools/gate.py                      # full set, about 40 minutes on 2 cores
    .venv/bin/python tools/gate.py --quick              # CI slice, a few minutes
    .venv/bin/python tools/gate.py --modules test_autocast -n 2 --out /tmp/gate
    .venv/bin/python tools/gate.py --pythonpath DIR     # thunder from `pip install --no-deps --target DIR ...`
    # overlay side = an already patched copy of thunder (with the installed overlay switched off):
    .venv/bin/python tools/gate.py --overlay-pythonpath /tmp/scratch --overlay-env THUNDER_OVERLAY=0

Exit status: 0 gate passed, 1 regressions, 2 usage/infrastructure error (e.g. a pytest run that crashed).
Writes DIR/gate-<thunder version>[-quick].json (default DIR: tools/results/) and the raw per-test
outcomes to DIR/raw/. This file is also the pytest plugin (`-p gate`) that records the outcomes.
"""

import argparse
import datetime
import json
import os
import platform
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path

TOOLS = Path(__file__).resolve().parent
MODULES = ["test_jit_general", "test_autocast", "test_core", "test_transforms", "test_grad"]
# --quick: test_autocast fully plus the renaming-heavy part of test_jit_general
QUICK = [
    ("test_autocast", None),
    ("test_jit_general", "rename or proxy or litgpt or nanogpt or autocast or tag or cache_basic or args_order"),
]
OUTCOMES = ["passed", "failed", "error", "skipped", "xfailed", "xpassed"]
BAD = {"failed", "error", "missing"}

# ----------------------------------------------------------------------------------------------------
# pytest plugin part (loaded in the subprocess with `-p gate`; writes one JSON line per test to $GATE_OUT)


def _emit(rec):
    with open(os.environ["GATE_OUT"], "a") as f:
        f.write(json.dumps(rec) + "\n")


_config = None  # set in pytest_configure


def _is_controller():
    return not hasattr(_config, "workerinput")  # xdist workers report to the controller, which records


def pytest_configure(config):
    global _config
    _config = config


def pytest_sessionstart(session):
    if not _is_controller():
        return
    import torch
    import thunder
    import thunder.core.jit_ext as je

    _emit({
        "meta": True,
        "thunder": getattr(thunder, "__version__", "?"),
        "thunder_file": thunder.__file__,
        "torch": torch.__version__,
        "python": platform.python_version(),
        "jit_ext": f"{je.__file__} via {type(je.__loader__).__module__}.{type(je.__loader__).__name__}",
        "overlay_loaded": any(m.split(".")[0] == "thunder_overlay" for m in sys.modules),
    })


def _tail(report, n=15):
    if isinstance(report.longrepr, tuple):  # skip: (path, lineno, "Skipped: reason")
        return report.longrepr[-1]
    text = str(report.longrepr or "")
    return "\n".join(text.rstrip().splitlines()[-n:])


def pytest_runtest_logreport(report):
    if not _is_controller():
        return
    xfail = hasattr(report, "wasxfail")
    if report.when == "call":
        if report.passed:
            outcome = "xpassed" if xfail else "passed"
        elif report.skipped:
            outcome = "xfailed" if xfail else "skipped"
        else:
            outcome = "failed"
    elif report.failed:
        outcome = "error"  # setup/teardown failure, overrides the call outcome
    elif report.skipped:  # skipped/xfailed in setup (skip marks, skipif, xfail(run=False))
        outcome = "xfailed" if xfail else "skipped"
    else:
        return
    _emit({"id": report.nodeid, "outcome": outcome, "when": report.when, "secs": round(report.duration, 2),
           "msg": _tail(report) if outcome != "passed" else ""})


def pytest_collection_finish(session):
    if _is_controller():  # without xdist
        _emit({"total": len(session.items)})


try:
    import pytest

    @pytest.hookimpl(optionalhook=True)
    def pytest_xdist_node_collection_finished(node, ids):
        if not getattr(_config, "_gate_total", None):
            _config._gate_total = len(ids)
            _emit({"total": len(ids)})
except ImportError:  # imported by the driver, which needs no pytest
    pass


def pytest_collectreport(report):
    if report.failed and _is_controller():
        _emit({"id": f"{report.nodeid}::<collection>", "outcome": "error", "when": "collect", "msg": _tail(report)})


# ----------------------------------------------------------------------------------------------------
# driver part


def norm_id(module, nodeid):
    """'<any path>/test_core.py::test_x[cpu]' -> 'test_core.py::test_x[cpu]' (pytest may give '::test_x[cpu]')."""
    return f"{module}.py::{nodeid.partition('::')[2]}"


def fmt_time(s):
    return f"{int(s // 60)}m{int(s % 60):02d}s"


def run_side(args, module, kexpr, side, raw_dir):
    """Runs one module on one side; returns (meta, {test id: record}, seconds, returncode)."""
    out = raw_dir / f"{module}-{side}.jsonl"
    out.unlink(missing_ok=True)
    paths = ([args.overlay_pythonpath] if side == "overlay" and args.overlay_pythonpath else [])
    paths += [args.pythonpath] if args.pythonpath else []
    paths += [str(TOOLS)] + ([os.environ["PYTHONPATH"]] if os.environ.get("PYTHONPATH") else [])
    env = dict(os.environ, THUNDER_OVERLAY="1" if side == "overlay" else "0", GATE_OUT=str(out),
               PYTHONPATH=os.pathsep.join(paths), CUDA_VISIBLE_DEVICES="",
               # keep .pyc files out of site-packages / --pythonpath dirs (and reuse them across runs)
               PYTHONPYCACHEPREFIX=str(Path(tempfile.gettempdir()) / "thunder-gate-pycache"))
    if side == "overlay":
        env.update(kv.split("=", 1) for kv in args.overlay_env)
    k = "not cuda" + (f" and ({kexpr})" if kexpr else "")
    cmd = [args.python, "-m", "pytest", "--pyargs", f"thunder.tests.{module}", "-k", k, "-p", "gate",
           "-p", "no:cacheprovider", "-q", "-o", f"timeout={args.timeout}", "--no-header", "-rN"]
    cmd += ["-n", str(args.n)] if args.n > 0 else []
    log = raw_dir / f"{module}-{side}.log"
    t0 = time.time()
    done = threading.Event()

    def progress():
        while not done.wait(args.progress):
            recs = [json.loads(line) for line in open(out)] if out.exists() else []
            n, total = sum("outcome" in r for r in recs), max([r.get("total", 0) for r in recs] + [0])
            print(f"    [{module} {side}] {n}/{total or '?'} tests done, {fmt_time(time.time() - t0)}", flush=True)

    threading.Thread(target=progress, daemon=True).start()
    with open(log, "w") as logf, tempfile.TemporaryDirectory() as cwd:
        rc = subprocess.call(cmd, env=env, cwd=cwd, stdout=logf, stderr=subprocess.STDOUT)
    done.set()
    meta, results = {}, {}
    for line in open(out) if out.exists() else []:
        rec = json.loads(line)
        if rec.get("meta"):
            meta = rec
        elif "outcome" in rec:
            tid = norm_id(module, rec["id"])
            # a teardown error after a pass/fail is reported separately; keep the worst
            if tid not in results or rec["outcome"] == "error":
                results[tid] = rec
    return meta, results, time.time() - t0, rc


def load_allowlist(path):
    allow = {}
    for n, line in enumerate(Path(path).read_text().splitlines(), 1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        tid, _, why = line.partition("#")
        if not why.strip():
            sys.exit(f"{path}:{n}: entry without a reason ('test_id  # why'): {line.strip()}")
        allow[tid.strip()] = why.strip()
    return allow


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--modules", nargs="+", default=None, help=f"thunder.tests modules (default: {' '.join(MODULES)})")
    p.add_argument("--quick", action="store_true", help="CI slice: test_autocast + a -k slice of test_jit_general")
    p.add_argument("-k", dest="kexpr", default=None, help="extra -k expression (ANDed with 'not cuda')")
    p.add_argument("-n", type=int, default=2, help="pytest-xdist workers (0: no xdist)")
    p.add_argument("--out", default=str(TOOLS / "results"), help="output directory")
    p.add_argument("--pythonpath", default=None, help="prepend DIR to PYTHONPATH for both sides")
    p.add_argument("--overlay-pythonpath", default=None, help="prepend DIR to PYTHONPATH for the overlay side only")
    p.add_argument("--overlay-env", action="append", default=[], metavar="KEY=VAL",
                   help="extra environment for the overlay side, e.g. THUNDER_OVERLAY=0 with --overlay-pythonpath "
                   "pointing at an already patched thunder copy")
    p.add_argument("--allowlist", default=str(TOOLS / "gate-allowlist.txt"))
    p.add_argument("--python", default=sys.executable, help="interpreter for the pytest runs")
    p.add_argument("--timeout", type=int, default=900, help="per-test timeout in seconds (pytest-timeout)")
    p.add_argument("--progress", type=float, default=60, help="seconds between progress lines")
    args = p.parse_args()
    if args.quick and args.modules:
        p.error("--quick and --modules are exclusive")
    plan = QUICK if args.quick else [(m, None) for m in (args.modules or MODULES)]
    if args.kexpr:
        plan = [(m, f"({k}) and ({args.kexpr})" if k else args.kexpr) for m, k in plan]
    allow = load_allowlist(args.allowlist) if Path(args.allowlist).exists() else {}
    out_dir = Path(args.out).resolve()  # the pytest subprocesses run elsewhere
    raw_dir = out_dir / "raw"
    raw_dir.mkdir(parents=True, exist_ok=True)

    t_start = time.time()
    summary = {"date": datetime.datetime.now().isoformat(timespec="seconds"), "quick": args.quick,
               "argv": sys.argv[1:], "modules": {}, "regressions": [], "improvements": [],
               "allowlisted": [], "other_changes": [], "infra_errors": []}
    metas = {}
    for module, kexpr in plan:
        res = {}
        for side in ("stock", "overlay"):
            print(f"==> {module} [{side}] started at {fmt_time(time.time() - t_start)}", flush=True)
            meta, results, secs, rc = run_side(args, module, kexpr, side, raw_dir)
            metas.setdefault(side, meta)
            res[side] = results
            c = Counter(r["outcome"] for r in results.values())
            summary["modules"].setdefault(module, {})[side] = {
                **{o: c[o] for o in OUTCOMES}, "seconds": round(secs), "returncode": rc}
            print(f"    {module} [{side}] done in {fmt_time(secs)}: "
                  + " ".join(f"{o}={c[o]}" for o in OUTCOMES if c[o]) + f" (rc={rc})", flush=True)
            if rc not in (0, 1) or not results:
                summary["infra_errors"].append(f"{module} [{side}]: pytest exit {rc}, see {raw_dir}/{module}-{side}.log")
        stock, over = res["stock"], res["overlay"]
        regs = imps = 0
        for tid in sorted(stock.keys() | over.keys()):
            a = stock.get(tid, {}).get("outcome", "missing")
            b = over.get(tid, {}).get("outcome", "missing")
            if a == b:
                continue
            entry = {"module": module, "id": tid, "stock": a, "overlay": b,
                     "msg": over.get(tid, {}).get("msg") or stock.get(tid, {}).get("msg", "")}
            if a == "passed" and b in BAD:
                key = "allowlisted" if tid in allow else "regressions"
                regs += key == "regressions"
                entry["why"] = allow.get(tid)
            elif a in BAD and b == "passed":
                key, imps = "improvements", imps + 1
            else:
                key = "other_changes"
            summary[key].append(entry)
        summary["modules"][module]["regressions"] = regs
        summary["modules"][module]["improvements"] = imps

    for side, meta in metas.items():
        print(f"{side}: thunder {meta.get('thunder')} ({meta.get('jit_ext')}), "
              f"overlay loaded: {meta.get('overlay_loaded')}")
    st, ov = metas.get("stock", {}), metas.get("overlay", {})
    if st.get("jit_ext") == ov.get("jit_ext"):
        print("WARNING: stock and overlay imported jit_ext.py from the same file with the same loader: "
              "is the overlay installed?")
        summary["warning"] = "overlay side looks identical to stock"
    if st.get("thunder") != ov.get("thunder"):
        summary["infra_errors"].append(f"thunder version differs: stock {st.get('thunder')} overlay {ov.get('thunder')}")
    summary.update(thunder=st.get("thunder"), torch=st.get("torch"), python=st.get("python"),
                   sides={"stock": st, "overlay": ov}, seconds=round(time.time() - t_start))

    cols = OUTCOMES
    print(f"\n{'module':<18} {'side':<8} " + " ".join(f"{c:>7}" for c in cols) + "  regress improve    time")
    for module, m in summary["modules"].items():
        for side in ("stock", "overlay"):
            extra = f"  {m['regressions']:>7} {m['improvements']:>7}" if side == "overlay" else " " * 16
            print(f"{module:<18} {side:<8} " + " ".join(f"{m[side][c]:>7}" for c in cols)
                  + f"{extra} {fmt_time(m[side]['seconds']):>7}")
    for key in ("regressions", "allowlisted", "improvements", "other_changes"):
        if summary[key]:
            print(f"\n{key.upper()} ({len(summary[key])}):")
        for e in summary[key]:
            print(f"  {e['module']}: {e['id']}: {e['stock']} -> {e['overlay']}" + (f"  # {e['why']}" if e.get("why") else ""))
            if key == "regressions" and e["msg"]:
                print("      " + e["msg"].replace("\n", "\n      "))
    for e in summary["infra_errors"]:
        print(f"INFRA ERROR: {e}")

    out = out_dir / f"gate-{summary['thunder']}{'-quick' if args.quick else ''}.json"
    out.write_text(json.dumps(summary, indent=1) + "\n")
    verdict = "FAILED" if summary["regressions"] else "INCOMPLETE" if summary["infra_errors"] else "PASSED"
    print(f"\ngate {verdict}: {len(summary['regressions'])} regressions, {len(summary['improvements'])} improvements, "
          f"{len(summary['allowlisted'])} allowlisted; total {fmt_time(time.time() - t_start)}; wrote {out}")
    return 1 if summary["regressions"] else 2 if summary["infra_errors"] else 0


if __name__ == "__main__":
    sys.exit(main())
