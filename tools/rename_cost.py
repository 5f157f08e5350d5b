"""What the rename machinery costs in the first call of a 2-layer llama2-like model, stock vs overlay.

    python tools/rename_cost.py [--pairs 3]

Each side runs in its own process under cProfile (THUNDER_OVERLAY=0, then 1, alternating) and reports
the calls and time of the functions that record and apply names: ``_maybe_update_proxy_name`` on both
sides; ``_apply_trace_proxy_rename`` on both; ``_allocate_proxy_names`` and ``_record_signature_names``
on the overlay side. Times are cProfile's, so they are inflated, but alike on both sides.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

CHILD = r"""
import cProfile, json, pstats, torch, thunder
from litgpt import GPT
from thunder.tests.litgpt_model import Config
cfg = Config.from_name("llama2-like"); cfg.n_layer = 2
model = GPT(cfg)
x = torch.randint(0, cfg.padded_vocab_size, (2, 32))
profile = cProfile.Profile()
profile.enable()
thunder.jit(model)(x)
profile.disable()
stats = pstats.Stats(profile).stats
names = {"_maybe_update_proxy_name", "_apply_trace_proxy_rename", "_allocate_proxy_names", "_record_signature_names"}
out = {}
for (file, line, fn), (cc, nc, tt, ct, callers) in stats.items():
    if fn in names and "jit_ext" in file:
        out[fn] = {"calls": nc, "own_s": tt, "cumulative_s": ct}
out["first_call_s"] = sum(v[2] for v in stats.values())
print(json.dumps(out))
"""


def run(overlay: str) -> dict:
    env = dict(os.environ, THUNDER_OVERLAY=overlay, PYTHONWARNINGS="ignore")
    proc = subprocess.run([sys.executable, "-c", CHILD], env=env, capture_output=True, text=True, check=True)
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pairs", type=int, default=3)
    args = parser.parse_args(argv)
    for i in range(1, args.pairs + 1):
        for side, overlay in (("stock", "0"), ("overlay", "1")):
            result = run(overlay)
            parts = [f"{fn}: {v['calls']} calls, {v['cumulative_s'] * 1e3:.0f} ms"
                     for fn, v in sorted(result.items()) if isinstance(v, dict)]
            total = sum(v["cumulative_s"] for v in result.values() if isinstance(v, dict))
            print(f"[pair {i}] {side:<7} rename machinery {total * 1e3:6.0f} ms | " + "; ".join(parts), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
