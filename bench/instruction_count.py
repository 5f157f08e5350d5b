"""Machine instructions of the first call of a fresh thunder.jit, stock vs overlay, under valgrind.

    python bench/instruction_count.py [--workload nanogpt] [--workload llama2-like ...] [--runs 5]

A timing ratio on a shared 2-core machine cannot resolve 2% (docs/results.md); an instruction count can: it
does not depend on load, so stock and overlay run at the same time. Each side is one process
(THUNDER_OVERLAY=0 or 1) under ``valgrind --tool=callgrind --instr-atstart=no --fair-sched=yes``. It builds a
workload of ``bench/workloads.py`` on CPU, calls one jit of it to finish thunder's lazy imports, then switches
callgrind's instrumentation on with ``callgrind_control`` only around the first call of a second, fresh jit
with the torch executor: what the benchmark's ``compile`` of ``cpu-torch`` measures. The count is every
instruction of that call in user space, Python interpreter, torch and garbage collection included; objects
from before the call are frozen (``gc.freeze``), so no full collection of torch and thunder lands in one
side's count by chance. Both sides run with one hash seed (the parent's ``PYTHONHASHSEED``, else 0). A count
still moves from run to run, by up to 0.5% for a small workload like seed946-retrace and 0.02% for nanogpt and
llama2-like, stock's as much as the overlay's: ``--runs N`` runs N pairs and reports the medians and their
spread. About 5 minutes per litgpt-sized workload here.
"""

from __future__ import annotations

import argparse
import re
import shutil
import statistics
import subprocess
import sys
import tempfile

from bench_child import child_env, hash_seed, require_workloads

CHILD = r"""
import gc, os, subprocess, sys
import torch
torch.set_num_threads(1)
import thunder, workloads
# thunder's interpreter waits on a helper thread for a Python frame (InterpreterFrame.get_or_make_python_frame);
# how many instructions that wait spins depends on the GIL's switch interval, not on the work: keep it short
sys.setswitchinterval(1e-6)
(workload,) = [w for w in workloads.WORKLOADS if w.name == sys.argv[1]]
fn, args = workload.build("cpu")
thunder.jit(fn, executors=["torch"])(*args)
fn, args = workload.build("cpu")
toggle = lambda state: subprocess.run(["callgrind_control", "-i", state, str(os.getpid())], check=True, capture_output=True)
# Objects from before the call are never scanned by a collection within it (gc.freeze), so the count holds the
# collections of what the call itself allocates, not a full collection of torch and thunder that either side
# may or may not happen to trigger there
gc.collect()
gc.freeze()
toggle("on")
thunder.jit(fn, executors=["torch"])(*args)
toggle("off")
"""


def start(workload: str, overlay: str, out_dir: str) -> subprocess.Popen:
    # --fair-sched=yes: thunder's interpreter spins on `while not result_container: pass` until a helper thread
    # hands it a Python frame (InterpreterFrame.get_or_make_python_frame, 38 times in nanogpt's first call on
    # either side); valgrind runs one thread at a time, and under its default lock how long the spin lasts, and
    # so the count, moves by about 0.3% from run to run. Handing the lock over in turn makes each spin short
    # and the same: 3 runs of nanogpt's overlay side spread 0.29% without it, 0.008% with it.
    cmd = ["valgrind", "--tool=callgrind", "--instr-atstart=no", "--fair-sched=yes",
           f"--callgrind-out-file={out_dir}/{workload}.{overlay}.out", sys.executable, "-c", CHILD, workload]
    return subprocess.Popen(cmd, env=child_env(overlay), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def collected(proc: subprocess.Popen, what: str) -> int:
    output = proc.communicate()[0]
    match = re.search(r"Collected : (\d+)", output)
    if proc.returncode or not match:
        sys.exit(f"{what} failed (exit {proc.returncode}):\n{output[-3000:]}")
    return int(match.group(1))


def count_pair(workload: str) -> dict[str, int]:
    """Instructions of the first call on each side; stock and overlay run at once."""
    with tempfile.TemporaryDirectory() as out_dir:
        procs = {side: start(workload, flag, out_dir) for side, flag in (("stock", "0"), ("overlay", "1"))}
        try:
            return {side: collected(proc, f"{workload} {side}") for side, proc in procs.items()}
        finally:  # a failed side must not leave the other running
            for proc in procs.values():
                proc.kill()


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workload", action="append", help="a workload name of bench/workloads.py (repeatable)")
    parser.add_argument("--runs", type=int, default=1, help="pairs per workload; the summary gives medians and spread")
    args = parser.parse_args(argv)
    missing = [tool for tool in ("valgrind", "callgrind_control") if shutil.which(tool) is None]
    if missing:
        sys.exit(f"needs {' and '.join(missing)} on PATH (valgrind's callgrind tool)")
    if args.runs < 1:
        sys.exit("--runs must be at least 1")
    args.workload = args.workload or ["nanogpt"]
    require_workloads(args.workload)
    for workload in args.workload:
        print(f"{workload}: stock and overlay under callgrind (PYTHONHASHSEED={hash_seed()}), {args.runs} pair(s) ...",
              flush=True)
        pairs = []
        for run in range(1, args.runs + 1):
            pairs.append(count_pair(workload))
            stock, overlay = pairs[-1]["stock"], pairs[-1]["overlay"]
            print(f"{workload}: [{run}/{args.runs}] instructions in the first call: stock {stock:,}, overlay {overlay:,}, "
                  f"overlay/stock {overlay / stock:.4f}", flush=True)
        if args.runs > 1:
            stock, overlay = (statistics.median(p[side] for p in pairs) for side in ("stock", "overlay"))
            ratios = [p["overlay"] / p["stock"] for p in pairs]
            print(f"{workload}: medians of {args.runs}: stock {stock:,.0f} ({spread(pairs, 'stock')}), overlay "
                  f"{overlay:,.0f} ({spread(pairs, 'overlay')}), overlay/stock {overlay / stock:.4f} "
                  f"(pairs {min(ratios):.4f}-{max(ratios):.4f})", flush=True)
    return 0


def spread(pairs: list[dict[str, int]], side: str) -> str:
    counts = [p[side] for p in pairs]
    return f"spread {(max(counts) - min(counts)) / statistics.median(counts):.2%}"


if __name__ == "__main__":
    sys.exit(main())
