"""Regression gate: run thunder's own test modules on CPU under stock thunder and under the overlay.

Each module runs twice, in subprocesses (pytest + pytest-xdist, `-k "not cuda"`, CUDA hidden), first with
THUNDER_OVERLAY=0 (stock), then with THUNDER_OVERLAY=1 (overlay). Outcomes are compared per test id. A test
that passes stock and fails, errors or goes missing with the overlay is a regression and fails the gate
(exit 1), unless it is listed in tools/gate-allowlist.txt. Regressions are rerun once on both sides without
xdist; those that do not reproduce are reported as flaky and do not fail the gate (--no-confirm: no rerun).
Tests going from failed/error to passed are improvements.

Usage (run with the Python that has thunder, torch, pytest, pytest-xdist; test_grad also needs `fdm`):
    .venv/bin/python tools/gate.py                      # full set: about 56 minutes on 2 busy cores
    .venv/bin/python tools/gate.py --reuse-stock        # reuse stock results of an earlier run: about half
    .venv/bin/python tools/gate.py --quick              # CI slice: about 4-5 minutes
    .venv/bin/python tools/gate.py --modules test_autocast test_core -k "not float64" -n 2 --out /tmp/gate
    .venv/bin/python tools/gate.py --pythonpath DIR     # thunder from `pip install --no-deps --target DIR ...`
    # overlay side = an already patched copy of thunder (with the installed overlay switched off):
    .venv/bin/python tools/gate.py --overlay-pythonpath /tmp/scratch --overlay-env THUNDER_OVERLAY=0

Exit status: 0 gate passed, 1 regressions, 2 usage/infrastructure error (e.g. a pytest run that crashed).
Writes DIR/gate-<thunder version>[-quick].json (default DIR: tools/results/) and the raw per-test outcomes
and pytest logs to DIR/raw/. This file is also the pytest plugin (`-p gate`) that records the outcomes.
"""

import argparse
import datetime
import hashlib
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
    ("test_jit_general", ("proxy or tag_static or args_order or nanogpt or cache_basic or autograd_function"
                          " or (litgpt_variants and cpu-llama1 and not kvcache)")),
]
THUNDER_TORCH = ["thunder", "thunder_file", "torch"]  # meta fields --reuse-stock checks
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
    import thunder
    import thunder.core.jit_ext as je
    import torch

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


def read_results(module, out):
    """Reads a $GATE_OUT file: returns (header, meta, {test id: record})."""
    header, meta, results = {}, {}, {}
    lines = out.read_text().splitlines() if out.exists() else []
    for line in lines:
        try:
            rec = json.loads(line)
        except ValueError:  # a line being written
            continue
        if "outcome" in rec:
            tid = norm_id(module, rec["id"])
            # a teardown error after a pass/fail is reported separately; keep the worst
            if tid not in results or rec["outcome"] == "error":
                results[tid] = rec
        else:
            (meta if rec.get("meta") else header).update(rec)
    return header, meta, results


def run_side(args, module, kexpr, side, raw_dir, ids=None):
    """Runs one module on one side (only `ids`, without xdist, if given).

    Returns (meta, {test id: record}, seconds, returncode)."""
    k = "not cuda" + (f" and ({kexpr})" if kexpr else "")
    tag = hashlib.sha1(repr((k, args.pythonpath, args.n)).encode()).hexdigest()[:8]
    out = raw_dir / f"{module}-{side}-{tag}{'-confirm' if ids else ''}.jsonl"
    paths = ([args.overlay_pythonpath] if side == "overlay" and args.overlay_pythonpath else [])
    paths += [args.pythonpath] if args.pythonpath else []
    paths += [str(TOOLS)] + ([os.environ["PYTHONPATH"]] if os.environ.get("PYTHONPATH") else [])
    env = dict(os.environ, THUNDER_OVERLAY="1" if side == "overlay" else "0", GATE_OUT=str(out),
               PYTHONPATH=os.pathsep.join(paths), CUDA_VISIBLE_DEVICES="",
               # keep .pyc files out of site-packages / --pythonpath dirs (and reuse them across runs)
               PYTHONPYCACHEPREFIX=str(Path(tempfile.gettempdir()) / "thunder-gate-pycache"))
    if side == "overlay":
        env.update(kv.split("=", 1) for kv in args.overlay_env)
    sel = [k, args.n, args.python, args.pythonpath]
    if side == "stock" and not ids and args.reuse_stock:  # same selection, same thunder and torch: reuse
        header, meta, results = read_results(module, out)
        probe = "import thunder, torch; print(thunder.__version__, thunder.__file__, torch.__version__)"
        now = subprocess.run([args.python, "-c", probe], env=env, capture_output=True, text=True, check=False).stdout.split()
        if header.get("sel") == sel and header.get("complete") and now == [meta.get(x) for x in THUNDER_TORCH]:
            print(f"    reusing stock results of {header['date']} ({out.name})", flush=True)
            return meta, results, 0, header["returncode"]
    out.write_text(json.dumps({"sel": sel, "date": datetime.datetime.now().isoformat(timespec="seconds")}) + "\n")
    targets = [f"thunder.tests.{module}::{t.partition('::')[2]}" for t in ids] if ids else [f"thunder.tests.{module}"]
    cmd = [args.python, "-m", "pytest", "--pyargs", *targets, "-p", "gate", "-p", "no:cacheprovider", "-q",
           "-o", f"timeout={args.timeout}", "--no-header", "-rN"]
    if not ids:
        cmd += ["-k", k] + (["-n", str(args.n)] if args.n > 0 else [])
    log = out.with_suffix(".log")
    t0 = time.time()
    done = threading.Event()

    def progress():
        while not done.wait(args.progress):
            header, _, results = read_results(module, out)
            print(f"    [{module} {side}] {len(results)}/{header.get('total') or '?'} tests done, "
                  f"{fmt_time(time.time() - t0)}", flush=True)

    threading.Thread(target=progress, daemon=True).start()
    with open(log, "w") as logf, tempfile.TemporaryDirectory() as cwd:
        rc = subprocess.call(cmd, env=env, cwd=cwd, stdout=logf, stderr=subprocess.STDOUT)
    done.set()
    with open(out, "a") as f:  # marks the results as reusable (--reuse-stock)
        f.write(json.dumps({"complete": True, "returncode": rc}) + "\n")
    _, meta, results = read_results(module, out)
    return meta, results, time.time() - t0, rc


def load_allowlist(path):
    allow = {}
    for n, line in enumerate(Path(path).read_text().splitlines(), 1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        tid, _, why = line.partition("#")
        if not why.strip():
            print(f"{path}:{n}: entry without a reason ('test_id  # why'): {line.strip()}", file=sys.stderr)
            sys.exit(2)
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
    p.add_argument("--reuse-stock", action="store_true",
                   help="reuse the stock results in DIR/raw of an earlier run with the same thunder, torch and selection")
    p.add_argument("--no-confirm", dest="confirm", action="store_false",
                   help="do not rerun regressions (both sides, without xdist) to weed out flaky tests")
    p.add_argument("--allowlist", default=str(TOOLS / "gate-allowlist.txt"))
    p.add_argument("--python", default=sys.executable, help="interpreter for the pytest runs")
    p.add_argument("--timeout", type=int, default=900, help="per-test timeout in seconds (pytest-timeout)")
    p.add_argument("--progress", type=float, default=60, help="seconds between progress lines")
    args = p.parse_args()
    # the pytest runs start in a temporary directory: make the paths absolute
    for name in ("pythonpath", "overlay_pythonpath", "python"):
        if getattr(args, name) and os.sep in getattr(args, name):
            setattr(args, name, os.path.abspath(getattr(args, name)))
    if args.quick and args.modules:
        p.error("--quick and --modules are exclusive")
    plan = QUICK if args.quick else [(m, None) for m in (args.modules or MODULES)]
    if args.kexpr:
        plan = [(m, f"({k}) and ({args.kexpr})" if k else args.kexpr) for m, k in plan]
    allow = load_allowlist(args.allowlist) if Path(args.allowlist).exists() else {}
    out_dir = Path(args.out).resolve()
    raw_dir = out_dir / "raw"
    raw_dir.mkdir(parents=True, exist_ok=True)

    t_start = time.time()
    summary = {"date": datetime.datetime.now().isoformat(timespec="seconds"), "quick": args.quick,
               "argv": sys.argv[1:], "modules": {}, "regressions": [], "improvements": [],
               "allowlisted": [], "flaky": [], "other_changes": [], "infra_errors": []}
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
                summary["infra_errors"].append(f"{module} [{side}]: pytest exit {rc}, see {raw_dir}/{module}-{side}-*.log")
        stock, over = res["stock"], res["overlay"]

        def outcome(results, tid):
            return results.get(tid, {}).get("outcome", "missing")

        changed = [{"module": module, "id": tid, "stock": outcome(stock, tid), "overlay": outcome(over, tid),
                    "msg": over.get(tid, {}).get("msg") or stock.get(tid, {}).get("msg", "")}
                   for tid in sorted(stock.keys() | over.keys()) if outcome(stock, tid) != outcome(over, tid)]
        regressed = [e["id"] for e in changed if e["stock"] == "passed" and e["overlay"] in BAD and e["id"] not in allow]
        if regressed and args.confirm:
            print(f"    rerunning {len(regressed)} regressed tests on both sides without xdist", flush=True)
            again = {side: run_side(args, module, kexpr, side, raw_dir, ids=regressed)[1] for side in ("stock", "overlay")}
        for e in changed:
            if e["stock"] == "passed" and e["overlay"] in BAD:
                key = "allowlisted" if e["id"] in allow else "regressions"
                e["why"] = allow.get(e["id"])
                if key == "regressions" and args.confirm:
                    a, b = outcome(again["stock"], e["id"]), outcome(again["overlay"], e["id"])
                    e["rerun"] = f"{a} -> {b}"
                    key = "regressions" if a == "passed" and b in BAD else "flaky"
            elif e["stock"] in BAD and e["overlay"] == "passed":
                key = "improvements"
            else:
                key = "other_changes"
            summary[key].append(e)
        for key in ("regressions", "improvements", "flaky"):
            summary["modules"][module][key] = sum(e["module"] == module for e in summary[key])

    for side, meta in metas.items():
        print(f"{side}: thunder {meta.get('thunder')} ({meta.get('jit_ext')}), "
              f"overlay loaded: {meta.get('overlay_loaded')}")
    st, ov = metas.get("stock", {}), metas.get("overlay", {})
    if st.get("jit_ext") == ov.get("jit_ext"):
        print("WARNING: stock and overlay imported jit_ext.py from the same file with the same loader: "
              "is the overlay installed?")
        summary["warning"] = "overlay side looks identical to stock"
    for side, meta in metas.items():
        path = args.overlay_pythonpath if side == "overlay" and args.overlay_pythonpath else args.pythonpath
        if path and not meta.get("thunder_file", "").startswith(path + os.sep):
            summary["infra_errors"].append(f"{side} imported thunder from {meta.get('thunder_file')}, not from {path}")
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
    for key in ("regressions", "flaky", "allowlisted", "improvements", "other_changes"):
        if summary[key]:
            print(f"\n{key.upper()} ({len(summary[key])}):")
        for e in summary[key]:
            print(f"  {e['id']}: {e['stock']} -> {e['overlay']}" + (f"  # {e['why']}" if e.get("why") else "")
                  + (f" (rerun: {e['rerun']})" if e.get("rerun") else ""))
            if key == "regressions" and e["msg"]:
                print("      " + e["msg"].replace("\n", "\n      "))
    for e in summary["infra_errors"]:
        print(f"INFRA ERROR: {e}")

    out = out_dir / f"gate-{summary['thunder']}{'-quick' if args.quick else ''}.json"
    out.write_text(json.dumps(summary, indent=1) + "\n")
    verdict = "FAILED" if summary["regressions"] else "PASSED"
    print(f"\ngate {verdict}: {len(summary['regressions'])} regressions, {len(summary['improvements'])} improvements, "
          f"{len(summary['allowlisted'])} allowlisted, {len(summary['flaky'])} flaky; total {fmt_time(time.time() - t_start)}; wrote {out}")
    return 1 if summary["regressions"] else 2 if summary["infra_errors"] else 0


if __name__ == "__main__":
    sys.exit(main())
