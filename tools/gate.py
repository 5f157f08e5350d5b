"""Regression gate: run thunder's own test modules on CPU under stock thunder and under the overlay.

Every module of thunder.tests and thunder.tests.distributed that the installed thunder ships runs twice, in
subprocesses (pytest + pytest-xdist, `-k "not cuda"`, CUDA hidden, pytest-timeout per test): with
THUNDER_OVERLAY=0 (stock), then THUNDER_OVERLAY=1 (overlay). Outcomes are compared per test id. A test that
passes stock and fails, errors, times out, crashes its worker or goes missing with the overlay is a
regression, and so is a collection error the overlay has and stock has not; regressions fail the gate (exit 1)
unless listed in tools/gate-allowlist.txt. Regressions are rerun once on both sides without xdist; those that
do not reproduce are reported as flaky and do not fail the gate (--no-confirm: no rerun). Modules that fail
to collect on both sides are reported as not collectable, with the reason.

Stock outcomes depend only on thunder's files, torch, Python and the test module, not on the series: each unit
(module, or shard of one) is stored under a key of exactly those (gatelib/runner.py Runner.key) and reused by
any later run whose key matches, so a new series reruns only the overlay side. The overlay side's key adds the
overlay's version, the series' fingerprint (the sha256 of each patch file, per thunder file it changes) and the
patched sources; its outcomes are reused with --resume.

Usage (run with the Python that has thunder, torch, pytest, pytest-xdist, pytest-timeout and thunder's test
requirements; `--pythonpath DIR` takes thunder from `pip install --no-deps --target DIR ...`):
    python tools/gate.py --quick                              # the CI slice, a few minutes
    python tools/gate.py --out tools/results/gate-0.2.6       # every module; 1.5-2 hours per side on 2 cores (0.2.6);
                                                              # stock outcomes stored with the same key are reused
    python tools/gate.py --out ... --resume                   # continue a stopped run, on any machine: reuses the
                                                              # overlay's stored outcomes too where the key matches
    python tools/gate.py --out ... --rerun-stock              # run the stock side again whatever is stored
    python tools/gate.py --out ... --stock-only -n 1          # stock's outcomes now, the overlay side later
    python tools/gate.py --status                             # per folder of tools/results: thunder, dates, whether
                                                              # its overlay outcomes are of the series patches/ holds
                                                              # now, the modules each side still lacks (runs nothing)
    python tools/gate.py --collect-only                       # what collects on each side, and shard sizes
    python tools/gate.py --report tools/results/gate-0.2.6   # the markdown table of a run (docs/results.md)
    python tools/gate.py --modules test_autocast -k "not float64" --test-root DIR   # DIR/test_autocast.py
    python tools/gate.py --overlay-pythonpath /tmp/patched --overlay-env THUNDER_OVERLAY=0   # a patched copy

Writes, in DIR (default tools/results/gate-<thunder>[-quick]):
    stock.outcomes, overlay.outcomes   the outcome store (gatelib/store.py): per unit its key, tests, collection
                                       errors, pytest's exit and one line per test (outcome, one-line reason);
                                       sorted text, no times, rewritten as each unit finishes. Kept in git:
                                       --report and --resume need nothing else
    gate-<thunder>[-quick].json        the overall summary (rewritten after every module), with the series'
                                       fingerprint and the keys of both sides. Kept in git
    modules/<module>.json, raw/        per-module summaries, the raw per-test JSON lines and pytest logs: for
                                       debugging, ignored by git; nothing reads them but a confirming rerun's
                                       --resume
A run writes into a folder with one selection per module: a unit run with another key replaces its block.
Exit status: 0 passed, 1 regressions, 2 usage or infrastructure error (e.g. a pytest run that crashed, thunder
imported from the wrong place), 130 stopped by Ctrl-C (--resume continues).
"""

import argparse
import datetime
import json
import os
import sys
import threading
import time
from pathlib import Path

TOOLS = Path(__file__).resolve().parent
sys.path.insert(0, str(TOOLS))

from gatelib import outcomes, plan as planning, report, status, store  # noqa: E402
from gatelib.runner import SIDES, Runner, infra_problem  # noqa: E402

# --quick: test_autocast fully plus the renaming-heavy part of test_jit_general
QUICK = [
    ("test_autocast", None),
    ("test_jit_general", ("proxy or tag_static or args_order or nanogpt or cache_basic or autograd_function"
                          " or (litgpt_variants and cpu-llama1 and not kvcache)")),
]


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--modules", nargs="+", default=None,
                   help="modules to run, e.g. test_core distributed.test_ddp (default: every module thunder ships)")
    p.add_argument("--exclude", nargs="+", default=[], help="modules to leave out, e.g. test_ops test_grad")
    p.add_argument("--quick", action="store_true", help="CI slice: test_autocast + a -k slice of test_jit_general")
    p.add_argument("-k", dest="kexpr", default=None, help="extra -k expression (ANDed with 'not cuda')")
    p.add_argument("-n", type=int, default=2, help="pytest-xdist workers (0: no xdist)")
    p.add_argument("--xdist-min-seconds", type=float, default=30, metavar="S",
                   help="run a module without xdist when an earlier run (see --eta-from) took less than S seconds "
                        "on each side: xdist's start-up costs about 10 s and saves nothing there")
    p.add_argument("--shards", nargs="+", default=[], metavar="MODULE=N",
                   help=f"run MODULE in N parts, saved separately (default: "
                        f"{' '.join(f'{m}={n}' for m, n in planning.DEFAULT_SHARDS.items())}; MODULE=1: one part)")
    p.add_argument("--out", default=None, help="output folder (default: tools/results/gate-<thunder>[-quick])")
    p.add_argument("--resume", action="store_true",
                   help="also reuse the overlay side's outcomes in OUT/overlay.outcomes whose key matches (same "
                        "thunder tree, torch, Python, test file, plugin, selection, overlay version, series and "
                        "patched sources): continues a stopped run, on any machine; units that did not finish rerun")
    p.add_argument("--reuse-stock", action="store_true",
                   help="the default now, kept for old command lines: stock outcomes in OUT/stock.outcomes whose key "
                        "matches (same thunder tree, torch, Python, test file, plugin and selection) are always "
                        "reused, whatever the series")
    p.add_argument("--rerun-stock", action="store_true",
                   help="run the stock side again even where OUT/stock.outcomes holds outcomes of the same key")
    p.add_argument("--stock-only", action="store_true",
                   help="run the stock side only and compare nothing: stock's outcomes do not depend on the series, "
                        "so they can be run ahead of it; a later run reuses them from OUT/stock.outcomes")
    p.add_argument("--collect-only", action="store_true",
                   help="only collect, on both sides: tests per module, collection errors, shard sizes")
    p.add_argument("--test-root", default=None, metavar="DIR",
                   help="run module M as the file DIR/M.py (a patched copy of thunder's test module) instead of "
                        "--pyargs thunder.tests.M; test ids stay the same")
    p.add_argument("--pythonpath", default=None, help="prepend DIR to PYTHONPATH for both sides")
    p.add_argument("--overlay-pythonpath", default=None, help="prepend DIR to PYTHONPATH for the overlay side only")
    p.add_argument("--overlay-env", action="append", default=[], metavar="KEY=VAL",
                   help="extra environment for the overlay side, e.g. THUNDER_OVERLAY=0 with --overlay-pythonpath "
                        "pointing at an already patched thunder copy")
    p.add_argument("--no-confirm", dest="confirm", action="store_false",
                   help="do not rerun regressions (both sides, without xdist) to weed out flaky tests")
    p.add_argument("--no-gloo", dest="gloo", action="store_false",
                   help="leave thunder's CUDA-only distributed tests uninstantiated on CPU (default: gatelib/gloo.py "
                        "adds their CPU variants, which run on gloo through thunder/tests/distributed/helper.py)")
    p.add_argument("--allowlist", default=str(TOOLS / "gate-allowlist.txt"))
    p.add_argument("--python", default=sys.executable, help="interpreter for the pytest runs")
    p.add_argument("--timeout", type=int, default=900, help="per-test timeout in seconds (pytest-timeout); "
                   "a test that runs longer is recorded as 'timeout'")
    p.add_argument("--progress", type=float, default=60, help="seconds between progress lines")
    p.add_argument("--eta-from", nargs="+", default=[], metavar="PATH",
                   help="earlier summaries (files or folders) whose per-module times and test counts feed the ETA "
                        "and --xdist-min-seconds (always read: OUT and the runs under tools/results of the same thunder)")
    p.add_argument("--markdown", action="store_true", help="print the markdown table of all modules at the end")
    p.add_argument("--report", default=None, metavar="DIR",
                   help="run nothing: print the markdown table (and listed differences) of the run in DIR, rebuilt "
                        "from DIR/stock.outcomes and DIR/overlay.outcomes (a folder without them: its gate-*.json)")
    p.add_argument("--status", action="store_true",
                   help="run nothing: per folder under tools/results, its thunder, dates, whether its overlay outcomes "
                        "are of the series patches/ holds now, and the modules each side still lacks")
    args = p.parse_args(argv)
    # the pytest runs start in a temporary directory: make the paths absolute
    for name in ("pythonpath", "overlay_pythonpath", "python", "test_root"):
        if getattr(args, name) and os.sep in getattr(args, name):
            setattr(args, name, os.path.abspath(getattr(args, name)))
    if args.quick and args.modules:
        p.error("--quick and --modules are exclusive")
    try:
        args.shard_counts = dict(planning.DEFAULT_SHARDS, **{m: int(n) for m, n in (s.split("=") for s in args.shards)})
    except ValueError:
        p.error("--shards takes MODULE=N, e.g. test_ops=4")
    return args


def print_report(folder, allow):
    """The run in `folder`, rebuilt from its outcome store; a folder whose store has no module on both sides
    yet (or none at all: runs before the store) is shown from its summary JSON."""
    summary = status.rebuild(folder, allow) if status.has_store(folder) else None
    if summary and summary["modules"]:
        print(f"{folder}: thunder {summary.get('thunder')}, torch {summary.get('torch')}, rebuilt from "
              f"{' and '.join(summary['rebuilt_from'])}; "
              + ("every module complete on both sides" if summary["complete"] else
                 f"INCOMPLETE: {len(summary['incomplete'])} modules lack a side") + "\n")
    else:
        summaries = sorted(Path(folder).glob("gate-*.json"), key=lambda f: f.stat().st_mtime)
        if not summaries:
            print(f"no module on both sides in the outcome store and no gate-*.json in {folder}", file=sys.stderr)
            return 2
        incomplete = summary and summary["incomplete"]
        summary = json.loads(summaries[-1].read_text())
        print(f"{summaries[-1]}: thunder {summary.get('thunder')}, torch {summary.get('torch')}, {summary.get('date')}, "
              f"{'complete' if summary.get('complete') else 'INCOMPLETE'}"
              + (" (the outcome store has no module on both sides yet)" if incomplete else "") + "\n")
        summary["incomplete"] = incomplete or {}
    print(report.markdown_table(summary))
    print(report.entries_text(summary))
    lacking = {}
    for module, sides in summary["incomplete"].items():
        lacking.setdefault(" and ".join(sides), []).append(module)
    for sides, modules in lacking.items():
        print(f"\nSTORE LACKS {sides.upper()} ({len(modules)}): {', '.join(modules)}")
    if "totals" in summary:  # summaries before 2026-12-02 have none
        print("\n" + report.totals_text(summary))
    return 0


def select_modules(args, runner, parser_error):
    if args.quick:
        plan = list(QUICK)
    else:
        root = args.test_root or runner.probes["stock"]["tests_dir"]
        shipped = planning.discover(root)
        unknown = [m for m in (args.modules or []) + args.exclude if m not in shipped]
        if unknown:
            parser_error(f"no such module in {root}: {' '.join(unknown)} (modules: {' '.join(shipped)})")
        plan = [(m, None) for m in (args.modules or shipped) if m not in args.exclude]
    if args.kexpr:
        plan = [(m, f"({k}) and ({args.kexpr})" if k else args.kexpr) for m, k in plan]
    return plan


class Ticker:
    """Prints the progress line every `period` seconds while the gate runs."""

    def __init__(self, runner, eta, period):
        self.runner, self.eta, self.period, self.t0 = runner, eta, period, time.time()
        self.stop = threading.Event()
        threading.Thread(target=self.loop, daemon=True).start()

    def loop(self):
        while not self.stop.wait(self.period):
            print(self.line(), flush=True)

    def line(self):
        cur = self.runner.current
        if not cur:
            return self.eta.line("between runs", None, 0, 0, None, time.time() - self.t0)
        run = outcomes.read_run(cur["unit"].module, cur["path"])
        label = f"{cur['unit'].label} [{cur['side']}]" + (" rerun" if cur["rerun"] else "")
        task = None if cur["rerun"] else (cur["unit"], cur["side"])
        return self.eta.line(label, task, time.time() - cur["t0"], len(run["results"]), run["total"],
                             time.time() - self.t0)


def run_module(args, runner, eta, units, allow):
    """Both sides of every unit of one module, the comparison and the confirming reruns.
    Returns (module summary, {side: the plugin's meta record of that side})."""
    module = units[0].module
    runs = {side: [] for side in SIDES}
    infra = []
    for unit in units:
        for side in SIDES:
            r = runner.run(unit, side)
            eta.finished((unit, side), 0 if r["reused"] else r["seconds"], r["seconds"], r["total"])
            runs[side].append(r)
            c = outcomes.counts(r["results"])
            how = f"reused from {r['reused']}" if r["reused"] else f"done in {report.fmt_time(r['seconds'])}"
            errors = f", {len(r['collect_errors'])} collection error(s)" if r["collect_errors"] else ""
            print(f"    {unit.label} [{side}] {how}: " + ", ".join([f"{r['total'] or 0} tests"]
                  + [" ".join(f"{o}={n}" for o, n in c.items() if n)] * any(c.values()))
                  + f"{errors} (rc={r['returncode']})", flush=True)
            if problem := infra_problem(r):
                infra.append(f"{unit.label} [{side}]: {problem}")
    merged = {side: report.merge_runs(runs[side]) for side in SIDES}
    found = outcomes.compare(module, merged["stock"], merged["overlay"], allow)
    to_rerun = [e["id"] for e in found["regressions"] if not e["id"].endswith("::<collection>")]
    found["flaky"] = []
    if to_rerun and args.confirm:
        print(f"    rerunning {len(to_rerun)} regressed tests on both sides without xdist", flush=True)
        again = {}
        for side in SIDES:
            r = runner.run(planning.Unit(module, units[0].kexpr), side, ids=to_rerun)
            again[side] = r["results"]
            if problem := infra_problem(r):
                infra.append(f"{module} rerun [{side}]: {problem}")
        found["regressions"], found["flaky"] = outcomes.confirm(found["regressions"], again["stock"], again["overlay"])
    found["infra_errors"] = infra
    meta = {"date": datetime.datetime.now().isoformat(timespec="seconds"), "quick": args.quick,
            "thunder": runner.probes["stock"]["thunder"], "torch": runner.probes["stock"]["torch"],
            "selection": {"k": runner.kexpr(units[0]), "n": runner.workers.get(module, args.n), "shards": len(units),
                          "timeout": args.timeout,
                          "test_root": args.test_root, "pythonpath": args.pythonpath}}
    seen = {side: next((r["meta"] for r in runs[side] if r["meta"]), {}) for side in SIDES}
    return report.module_summary(module, runs, found, meta), seen


def check_sides(args, summary, metas):
    """Infrastructure checks across modules: the overlay side really differs, thunder came from where asked."""
    st, ov = metas.get("stock", {}), metas.get("overlay", {})
    for side, meta in metas.items():
        ov_meta = meta.get("overlay") or {}
        overlay = (f"{ov_meta.get('state')} {ov_meta.get('version')}, {len(ov_meta.get('patches') or [])} patches, series "
                   f"{store.digest(ov_meta['series']) if ov_meta.get('series') else None}, patched sources "
                   f"{ov_meta.get('patched_sources_sha256')}") if ov_meta else None
        print(f"{side}: thunder {meta.get('thunder')} ({meta.get('jit_ext')}), overlay: {overlay}")
    if st.get("jit_ext") and st.get("jit_ext") == ov.get("jit_ext"):
        print("WARNING: stock and overlay imported jit_ext.py from the same file with the same loader: "
              "is the overlay installed?")
        summary["warning"] = "overlay side looks identical to stock"
    for side, meta in metas.items():
        path = args.overlay_pythonpath if side == "overlay" and args.overlay_pythonpath else args.pythonpath
        if path and not (meta.get("thunder_file") or "").startswith(path + os.sep):
            summary["infra_errors"].append(f"{side} imported thunder from {meta.get('thunder_file')}, not from {path}")
    if st.get("thunder") != ov.get("thunder"):
        summary["infra_errors"].append(f"thunder version differs: stock {st.get('thunder')} overlay {ov.get('thunder')}")


def stock_only(runner, eta, by_module):
    """The stock side of every unit, saved in OUT/raw for a later --reuse-stock; nothing is compared."""
    for module, units in by_module.items():
        for unit in units:
            r = runner.run(unit, "stock")
            eta.finished((unit, "stock"), 0 if r["reused"] else r["seconds"], r["seconds"], r["total"])
            how = f"reused from {r['reused']}" if r["reused"] else f"done in {report.fmt_time(r['seconds'])}"
            c = outcomes.counts(r["results"])
            print(f"  {unit.label} [stock] {how}: {r['total'] or 0} tests "
                  + " ".join(f"{o}={n}" for o, n in c.items() if n) + f" (rc={r['returncode']})", flush=True)
            if problem := infra_problem(r):
                print(f"INFRA ERROR: {unit.label} [stock]: {problem}", flush=True)
    print(f"stock side saved in {runner.store_file('stock')}: a run of the same selection reuses it")
    return 0


def collect_only(args, runner, plan, out_dir):
    """Collects every module on both sides: tests per module, collection errors and the shard sizes."""
    result, bad = {}, []
    for module, kexpr in plan:
        unit = planning.Unit(module, kexpr)
        sides = {side: runner.run(unit, side) for side in SIDES}
        row = {side: {"tests": r["total"] or 0, "collect": outcomes.collect_status(r),
                      **({"reason": next(iter(r["collect_errors"].values()))["reason"]} if r["collect_errors"] else {}),
                      "seconds": round(r["seconds"])} for side, r in sides.items()}
        ids = {side: set(r["collected"] or []) for side, r in sides.items()}
        missing = sorted(ids["stock"] - ids["overlay"])
        new_error = row["overlay"]["collect"] != "ok" and row["stock"]["collect"] == "ok"
        if missing or new_error:
            bad.append(module)
            row["missing_with_overlay"] = missing[:50]
        count = args.shard_counts.get(module, 1)
        if count > 1:
            sizes = [0] * count
            for part in ids["stock"]:
                sizes[outcomes.shard_of(part, count) - 1] += 1
            row["shard_sizes"] = sizes
        result[module] = row
        s, o = row["stock"], row["overlay"]
        print(f"  {module:<40} stock {s['tests']:>5} {s['collect']:<16} overlay {o['tests']:>5} {o['collect']:<16}"
              + (f" shards {row['shard_sizes']}" if "shard_sizes" in row else "")
              + (f"  reason: {s.get('reason') or o.get('reason')}" if "reason" in s or "reason" in o else ""),
              flush=True)
    path = out_dir / f"collect-{runner.probes['stock']['thunder']}.json"
    path.write_text(json.dumps({"collect_only": True, "quick": args.quick, "date": datetime.datetime.now().isoformat(
        timespec="seconds"), "argv": sys.argv[1:], "k": args.kexpr, "modules": result}, indent=1) + "\n")
    print(f"\n{sum(r['stock']['tests'] for r in result.values())} tests collected stock in {len(result)} modules; "
          f"differences with the overlay in: {', '.join(bad) or 'none'}; wrote {path}")
    return 1 if bad else 0


def main(argv=None):
    args = parse_args(argv)
    if args.status:
        print(status.status_text(TOOLS / "results", TOOLS.parent / "patches"), end="")
        return 0
    try:
        allow = outcomes.load_allowlist(args.allowlist) if Path(args.allowlist).exists() else {}
    except ValueError as e:
        print(e, file=sys.stderr)
        return 2
    if args.report:
        return print_report(args.report, allow)
    runner = Runner(args)
    version = runner.probes["stock"]["thunder"]
    out_dir = Path(args.out or TOOLS / "results" / f"gate-{version}{'-quick' if args.quick else ''}").resolve()
    runner.raw_dir, runner.store_dir = out_dir / "raw", out_dir
    runner.raw_dir.mkdir(parents=True, exist_ok=True)
    plan = select_modules(args, runner, lambda msg: sys.exit(f"gate.py: {msg}"))
    if args.collect_only:
        return collect_only(args, runner, plan, out_dir)

    by_module = planning.units(plan, args.shard_counts)
    tasks = [(u, side) for us in by_module.values() for u in us for side in SIDES
             if side == "stock" or not args.stock_only]
    sources = [out_dir, *report.results_of(TOOLS / "results", version), *args.eta_from]
    known = report.history(sources, args.quick)
    runner.workers = {m: 0 for m in by_module
                      if max(known["seconds"].get((m, side), args.xdist_min_seconds) for side in SIDES)
                      < args.xdist_min_seconds}
    eta = report.Eta(tasks, known["seconds"], known["tests"])
    ticker = Ticker(runner, eta, args.progress)
    if args.stock_only:
        return stock_only(runner, eta, by_module)
    (out_dir / "modules").mkdir(exist_ok=True)
    now = datetime.datetime.now().isoformat(timespec="seconds")
    head = {"date": now, "quick": args.quick, "argv": sys.argv[1:], "thunder": version,
            "torch": runner.probes["stock"]["torch"], "complete": False,
            "series": next(({"digest": d, **fp, "date": now} for d, fp in runner.series("overlay").items()), None),
            "keys": {side: runner.side_key(side) for side in SIDES}}
    summary_path = out_dir / f"gate-{version}{'-quick' if args.quick else ''}.json"
    modules, metas = {}, {}
    try:
        for module, units in by_module.items():
            print(f"==> {module}" + (f" in {len(units)} shards" if len(units) > 1 else "")
                  + f" at {report.fmt_time(time.time() - ticker.t0)}", flush=True)
            modules[module], seen = run_module(args, runner, eta, units, allow)
            metas.update({side: meta for side, meta in seen.items() if meta and side not in metas})
            (out_dir / "modules" / f"{module}.json").write_text(json.dumps(modules[module], indent=1) + "\n")
            summary_path.write_text(json.dumps(report.overall(modules, head), indent=1) + "\n")
    except KeyboardInterrupt:
        print(f"\nstopped; the finished runs are in {runner.raw_dir}: the same command with --resume continues",
              file=sys.stderr)
        return 130
    ticker.stop.set()

    summary = report.overall(modules, dict(head, complete=True, seconds=round(time.time() - ticker.t0),
                                           sides=metas, python=metas.get("stock", {}).get("python")))
    check_sides(args, summary, metas)
    print("\n" + report.console_table(summary))
    print(report.entries_text(summary))
    for e in summary["infra_errors"]:
        print(f"INFRA ERROR: {e}")
    if args.markdown:
        print("\n" + report.markdown_table(summary))
    summary_path.write_text(json.dumps(summary, indent=1) + "\n")
    print("\n" + report.totals_text(summary))
    verdict = "FAILED" if summary["regressions"] else "PASSED"
    reused = sum(1 for spent in eta.spent.values() if not spent)
    wall = report.fmt_time(summary["seconds"]) + (f" ({reused} of {len(tasks)} runs reused)" if reused else "")
    print(f"\ngate {verdict}: {len(summary['regressions'])} regressions, {len(summary['improvements'])} improvements, "
          f"{len(summary['allowlisted'])} allowlisted, {len(summary['flaky'])} flaky, "
          f"{len(summary['not_collectable'])} not collectable; wall time {wall}; "
          f"wrote {summary_path}")
    return 1 if summary["regressions"] else 2 if summary["infra_errors"] else 0


if __name__ == "__main__":
    sys.exit(main())
