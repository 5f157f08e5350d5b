"""What the rename machinery costs in the first call of a fresh thunder.jit, stock vs overlay.

    python bench/rename_cost.py [--workload llama2-like] [--pairs 3]

Each side runs in its own process (THUNDER_OVERLAY=0, then 1, alternating). It builds a workload of
``bench/workloads.py``, calls one jit of it to finish thunder's lazy imports, then profiles the first call
of a second, fresh jit (what the benchmark's ``compile`` measures) under cProfile. It reports the
Python function calls of that first call, which do not depend on machine load, and the calls and
cumulative time of the functions that record and apply names: ``_maybe_update_proxy_name`` and
``_apply_trace_proxy_rename`` on both sides, ``_allocate_proxy_names``, ``_name_holders``, ``_swap_proxies`` and ``_bind_traced_inputs``
on the overlay side, and ``replace_name``, which builds each renamed proxy. Times are cProfile's, so
they are inflated, but alike on both sides.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys

from bench_child import child_env, require_workloads

CHILD = r"""
import cProfile, json, pstats, sys
import thunder, workloads
(workload,) = [w for w in workloads.WORKLOADS if w.name == sys.argv[1]]
fn, args = workload.build("cpu")
thunder.jit(fn)(*args)
profile = cProfile.Profile()
profile.enable()
thunder.jit(fn)(*args)
profile.disable()
stats = pstats.Stats(profile).stats
names = {"_maybe_update_proxy_name", "_apply_trace_proxy_rename", "_allocate_proxy_names", "_bind_traced_inputs",
         "_name_holders", "_swap_proxies"}
out = {"calls": sum(v[1] for v in stats.values()), "first_call_s": sum(v[2] for v in stats.values()), "machinery": {}}
for (file, line, fn), (cc, nc, tt, ct, callers) in stats.items():
    if (fn in names and "jit_ext" in file) or (fn == "replace_name" and "proxies" in file):
        out["machinery"][fn] = {"calls": nc, "cumulative_s": ct}
print(json.dumps(out))
"""


def run(workload: str, overlay: str) -> dict:
    proc = subprocess.run([sys.executable, "-c", CHILD, workload], env=child_env(overlay), capture_output=True, text=True)
    if proc.returncode:
        sys.exit(f"{workload} with THUNDER_OVERLAY={overlay} failed:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workload", default="llama2-like", help="a workload name of bench/workloads.py")
    parser.add_argument("--pairs", type=int, default=3)
    args = parser.parse_args(argv)
    require_workloads([args.workload])
    calls = {}
    for i in range(1, args.pairs + 1):
        for side, overlay in (("stock", "0"), ("overlay", "1")):
            result = run(args.workload, overlay)
            calls.setdefault(side, result["calls"])
            machinery = result["machinery"]
            parts = [f"{fn}: {v['calls']} calls, {v['cumulative_s'] * 1e3:.0f} ms" for fn, v in sorted(machinery.items())]
            renaming = sum(v["cumulative_s"] for fn, v in machinery.items() if fn != "replace_name")
            print(f"[pair {i}] {side:<7} {result['calls']:>10,} calls, first call {result['first_call_s']:.2f} s, "
                  f"rename machinery {renaming * 1e3:.0f} ms | " + "; ".join(parts), flush=True)
    print(f"{args.workload}: overlay/stock function calls in the first call {calls['overlay'] / calls['stock']:.4f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
