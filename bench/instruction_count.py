"""Machine instructions of the first call of a fresh thunder.jit, stock vs overlay, under valgrind.

    python bench/instruction_count.py [--workload nanogpt] [--workload llama2-like ...]

A timing ratio on a shared 2-core machine cannot resolve 2% (see the README); an instruction count can:
it does not depend on load, so stock and overlay run at the same time. Each side is one process
(THUNDER_OVERLAY=0 or 1) under ``valgrind --tool=callgrind --instr-atstart=no``. It builds a workload
of ``bench/workloads.py`` on CPU, calls one jit of it to finish thunder's lazy imports, then switches
callgrind's instrumentation on with ``callgrind_control`` only around the first call of a second, fresh
jit with the torch executor: what the benchmark's ``compile`` of ``cpu-torch`` measures. The count is
every instruction of that call in user space, Python interpreter, torch and garbage collection
included. Both sides run with one hash seed (the parent's ``PYTHONHASHSEED``, else 0): with two random
seeds a small workload's count moves by up to 0.5%. About 5 minutes per litgpt-sized workload here.
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
import tempfile

from bench_child import child_env, hash_seed, require_workloads

CHILD = r"""
import os, subprocess, sys
import torch
torch.set_num_threads(1)
import thunder, workloads
(workload,) = [w for w in workloads.WORKLOADS if w.name == sys.argv[1]]
fn, args = workload.build("cpu")
thunder.jit(fn, executors=["torch"])(*args)
fn, args = workload.build("cpu")
toggle = lambda state: subprocess.run(["callgrind_control", "-i", state, str(os.getpid())], check=True, capture_output=True)
toggle("on")
thunder.jit(fn, executors=["torch"])(*args)
toggle("off")
"""


def start(workload: str, overlay: str, out_dir: str) -> subprocess.Popen:
    cmd = ["valgrind", "--tool=callgrind", "--instr-atstart=no",
           f"--callgrind-out-file={out_dir}/{workload}.{overlay}.out", sys.executable, "-c", CHILD, workload]
    return subprocess.Popen(cmd, env=child_env(overlay), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def collected(proc: subprocess.Popen, what: str) -> int:
    output = proc.communicate()[0]
    match = re.search(r"Collected : (\d+)", output)
    if proc.returncode or not match:
        sys.exit(f"{what} failed (exit {proc.returncode}):\n{output[-3000:]}")
    return int(match.group(1))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workload", action="append", help="a workload name of bench/workloads.py (repeatable)")
    args = parser.parse_args(argv)
    missing = [tool for tool in ("valgrind", "callgrind_control") if shutil.which(tool) is None]
    if missing:
        sys.exit(f"needs {' and '.join(missing)} on PATH (valgrind's callgrind tool)")
    args.workload = args.workload or ["nanogpt"]
    require_workloads(args.workload)
    for workload in args.workload:
        print(f"{workload}: stock and overlay under callgrind (PYTHONHASHSEED={hash_seed()}) ...", flush=True)
        with tempfile.TemporaryDirectory() as out_dir:
            procs = {side: start(workload, flag, out_dir) for side, flag in (("stock", "0"), ("overlay", "1"))}
            try:
                counts = {side: collected(proc, f"{workload} {side}") for side, proc in procs.items()}
            finally:  # a failed side must not leave the other running
                for proc in procs.values():
                    proc.kill()
        print(f"{workload}: instructions in the first call: stock {counts['stock']:,}, overlay {counts['overlay']:,}, "
              f"overlay/stock {counts['overlay'] / counts['stock']:.4f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
