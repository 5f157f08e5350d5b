"""Compare stock thunder with the overlay: alternating benchmark runs, then a ratio table.

    python bench/compare.py [--quick] [--pairs K] [--warmup W] [--compile-threshold 1.03] [--exec-threshold 1.02]
                            [--fail-above 3.0] [--out DIR] [--overlay-pythonpath DIR] [-k EXPR] [--large] [--null]
                            [--report-only]

First W warm-up runs per side (default 1), not compared: the first runs on a fresh machine or a fresh
virtual environment are slower on every workload (imports of lazily loaded modules, caches, clocks) and
would decide a pair by themselves. Then K pairs of subprocesses, stock (THUNDER_OVERLAY=0) and overlay
(THUNDER_OVERLAY=1), each ``python -m pytest bench/ --benchmark-json=...``, the order alternating
(stock-overlay, overlay-stock, ...), so that drifts of a shared machine hit both sides alike. All JSON and
logs stay in DIR (default bench/results/<timestamp>/) together with summary.txt / summary.json, ratios.png
(each benchmark's ratio and interval against its threshold) and, when the chain-N workloads ran, scaling.png.
Per benchmark the report shows every per-pair ratio, their median and its distribution-free 95% interval
(order statistics; it needs at least 6 pairs). With 6 pairs or more the verdict is PASS when the interval
lies at or below the threshold, FAIL above it, INCONCLUSIVE when it spans it (with the pairs a run would
need to decide). With fewer pairs it is INCONCLUSIVE, never PASS, and FAIL only when every per-pair ratio
lies above --fail-above (3.0: a gross slowdown, what CI's 2-pair run can catch). --quick changes the
workloads and rounds, never these rules: it gives the verdicts CI gets.
``--null`` runs stock thunder on both sides (an A/A run): its ratios are what this harness reports
on this machine when there is no difference at all, the yardstick for reading a real run.
Exit status: 0 PASS, 1 FAIL, 2 a run failed or nothing was comparable, 3 INCONCLUSIVE (no FAIL, and not
every benchmark decided); the last line counts PASS, FAIL and INCONCLUSIVE and names the rules.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))

import report  # noqa: E402

SIDES = (("stock", "0"), ("overlay", "1"))


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true",
                   help="CI's subset: fewer workloads and rounds, 2 pairs (about 7 minutes on 2 shared cores); "
                   "the verdict rules stay the same")
    p.add_argument("--pairs", type=int, default=None, help="stock/overlay pairs (default 2 quick, 5 otherwise)")
    p.add_argument("--warmup", type=int, default=1, help="runs per side before the pairs, not compared (default 1)")
    p.add_argument("--compile-threshold", type=float, default=1.03)
    p.add_argument("--exec-threshold", type=float, default=1.02)
    p.add_argument("--fail-above", type=float, default=report.FAIL_ABOVE,
                   help=f"with fewer than {report.MIN_PAIRS} pairs (no 95%% interval), FAIL when every per-pair ratio "
                   f"lies above this (default {report.FAIL_ABOVE}); otherwise such a benchmark is INCONCLUSIVE")
    p.add_argument("--out", type=Path, default=None, help="results folder (default bench/results/<timestamp>)")
    p.add_argument("--overlay-pythonpath", default=None, help="prepend to PYTHONPATH on the overlay side only")
    p.add_argument("-k", dest="keyword", default=None, help="pytest -k expression, e.g. 'cuda' or 'cpu'")
    p.add_argument("--large", action="store_true", help="also the larger litgpt configuration")
    p.add_argument("--stat", default="median", choices=("median", "min", "mean"), help="per-run statistic to compare")
    p.add_argument("--null", action="store_true", help="stock thunder on both sides: the harness's noise floor")
    p.add_argument("--report-only", action="store_true", help="only rebuild the report from --out")
    args = p.parse_args(argv)
    if args.null and args.overlay_pythonpath:
        p.error("--null runs stock on both sides; it cannot take --overlay-pythonpath")
    return args


def pytest_command(args, json_path: Path) -> list[str]:
    cmd = [sys.executable, "-m", "pytest", str(BENCH), "-q", "-rs", "-p", "no:cacheprovider"]
    cmd += [f"--benchmark-json={json_path}", "--benchmark-columns=min,median,max,rounds"]
    if args.quick:
        cmd += ["--bench-quick", "--benchmark-max-time=0.1", "--benchmark-min-rounds=5"]
    else:
        cmd += ["--bench-full", "--benchmark-max-time=0.5"]
    if args.large:
        cmd.append("--bench-large")
    if args.keyword:
        cmd += ["-k", args.keyword]
    return cmd


def side_env(side: str, flag: str, args) -> dict[str, str]:
    env = dict(os.environ, THUNDER_OVERLAY="0" if args.null else flag)
    if side == "overlay" and args.overlay_pythonpath:
        env["PYTHONPATH"] = os.pathsep.join(p for p in (args.overlay_pythonpath, env.get("PYTHONPATH")) if p)
    return env


def schedule(pairs: int, warmup: int) -> list[tuple[str, int, str, str]]:
    """(kind, number, side, flag) of every run in order: the warm-up runs, then the pairs, each pair's order
    the other way round from the last."""
    runs = [("warmup", i, side, flag) for i in range(1, warmup + 1) for side, flag in SIDES]
    for i in range(1, pairs + 1):
        runs += [("pair", i, side, flag) for side, flag in (SIDES if i % 2 else SIDES[::-1])]
    return runs


def run_pairs(args, out: Path) -> list[dict]:
    runs, start = [], time.monotonic()
    for kind, i, side, flag in schedule(args.pairs, args.warmup):
        stem = f"{kind}{i:02d}-{side}"
        total = args.pairs if kind == "pair" else args.warmup
        print(f"[{kind} {i}/{total}] {side:7} running ... (elapsed {time.monotonic() - start:6.1f}s)", flush=True)
        t0 = time.monotonic()
        with open(out / f"{stem}.log", "w") as log:
            rc = subprocess.call(
                pytest_command(args, out / f"{stem}.json"),
                env=side_env(side, flag, args),
                cwd=BENCH.parent,
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        took = time.monotonic() - t0
        status = "ok" if rc == 0 else f"pytest exit {rc}, see {out / stem}.log"
        print(f"[{kind} {i}/{total}] {side:7} {status} in {took:.1f}s (elapsed {time.monotonic() - start:6.1f}s)")
        if kind == "pair":
            runs.append({"pair": i, "side": side, "json": f"{stem}.json", "rc": rc, "seconds": round(took, 1)})
        elif rc != 0:
            print(f"warm-up run failed: pytest exit {rc}, see {out / stem}.log")
    (out / "runs.json").write_text(json.dumps(runs, indent=1))
    print(f"total {time.monotonic() - start:.1f}s for {args.pairs} pairs")
    return runs


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.pairs is None:
        args.pairs = 2 if args.quick else 5
    out = args.out or BENCH / "results" / time.strftime("%Y%m%d-%H%M%S")
    out.mkdir(parents=True, exist_ok=True)
    print(f"results in {out}")
    if args.null:
        print("null run: stock thunder on both sides; the 'overlay' column is a second stock process")
    if args.report_only:
        runs = json.loads((out / "runs.json").read_text())
    else:
        runs = run_pairs(args, out)

    pairs = []
    for i in sorted({r["pair"] for r in runs}):
        by_side = {r["side"]: out / r["json"] for r in runs if r["pair"] == i}
        pairs.append((by_side.get("stock"), by_side.get("overlay")))
    thresholds = {"compile": args.compile_threshold, "exec": args.exec_threshold}
    rows = report.build_rows([p for p in pairs if all(p)], thresholds, args.stat, args.fail_above)
    text = report.render(rows)
    if args.null:
        text = "null run: stock thunder on both sides\n" + text
    table = report.scaling(rows)
    if table:
        text += "\n\n" + report.render_scaling(table)
        if report.plot_scaling(table, out / "scaling.png"):
            text += f"\n\nwrote {out / 'scaling.png'}"
    title = f"{'null run (stock vs stock)' if args.null else 'stock vs overlay'}, {out.name}"
    if report.plot_ratios(rows, out / "ratios.png", args.fail_above, title):
        text += f"\nwrote {out / 'ratios.png'}"
    rules = rules_text(args)
    text += f"\n\n{rules}"
    print(text)

    failed = [r for r in runs if r["rc"] != 0]
    n = report.counts(rows)
    compared = sum(n.values())
    above = [r for r in rows if r.ratios and r.verdict == report.FAIL]
    open_ = [r for r in rows if r.ratios and r.verdict == report.INCONCLUSIVE]
    lines = []
    if failed:
        lines.append(f"FAILED: {len(failed)} pytest run(s) exited non-zero (logs in {out})")
        code, word = 2, "FAIL"
    elif not compared:
        lines.append("FAILED: no benchmark ran on both sides (all skipped or deselected?)")
        code, word = 2, "FAIL"
    elif above:
        lines.append("SLOWER than threshold: " + ", ".join(f"{r.workload}/{r.measure}/{r.target}" for r in above))
        code, word = 1, "FAIL"
    elif open_:
        lines.append("INCONCLUSIVE (no 95% interval, or it spans the threshold): " + ", ".join(
            f"{r.workload}/{r.measure}/{r.target}" + (f" (about {r.pairs_needed} pairs)" if r.pairs_needed else "")
            for r in open_))
        code, word = 3, "INCONCLUSIVE"
    else:
        code, word = 0, "PASS"
    lines.append(f"{word}: {n['PASS']} PASS, {n['FAIL']} FAIL, {n['INCONCLUSIVE']} INCONCLUSIVE of {compared} compared "
                 f"benchmarks ({rules}){'; runs failed or nothing compared' if code == 2 else ''}")
    print("\n".join(lines))
    (out / "summary.txt").write_text(text + "\n" + "\n".join(lines) + "\n")
    (out / "summary.json").write_text(json.dumps({
        "verdict": word, "exit": code, "counts": n, "rules": rules, "null": args.null,
        "rows": [r.__dict__ for r in rows]}, indent=1))
    return code


def rules_text(args) -> str:
    return (f"95% interval of the median overlay/stock {args.stat} ratio: compile <= {args.compile_threshold}, "
            f"exec <= {args.exec_threshold}; under {report.MIN_PAIRS} pairs FAIL only when every ratio > "
            f"{args.fail_above:g}")


if __name__ == "__main__":
    sys.exit(main())
