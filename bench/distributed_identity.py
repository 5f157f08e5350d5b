"""Distributed identity: under thunder.distributed (DDP, FSDP) does the overlay run exactly stock's program?

    python bench/distributed_identity.py [--models named llama2-like] [--configs ddp fsdp-zero2-none ...]

Stock thunder (THUNDER_OVERLAY=0) and the overlay (THUNDER_OVERLAY=1) each start 2 ranks on gloo (CPU; one
process group per side, distributed_capture.py) and run every model and configuration: ``ddp(thunder.jit(m))``
and ``fsdp(thunder.jit(m), device=cpu)`` with ZERO2 and ZERO3, bucketing NONE, LAYER and BLOCK, one forward
and backward. Per configuration and rank:

- outputs and gradients must be bitwise equal to stock's;
- the final forward and backward execution traces must equal stock's up to a consistent renaming of proxies
  (thunder_overlay.equivalence);
- no value that stock names after one of the program's variables may lose that name (thunder-overlay names);
- thunder_overlay.check_traces must pass on both sides, and must refuse the final forward trace with one
  output's dtype changed.

Exit codes: 0 every configuration identical and checked; 1 a difference, a lost name, a checker failure, a
planted lie not caught, or a side that could not run.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from distributed_capture import CONFIGS, MODELS, WORLD_SIZE  # noqa: E402
from fusion_identity import print_rows, run_both  # noqa: E402
from thunder_overlay import equivalence, names  # noqa: E402

# configurations for CI: one of each transform, bucketing and sharding strategy
QUICK_CONFIGS = ("ddp", "fsdp-zero2-layer", "fsdp-zero3-block")


@dataclass
class Row:
    model: str
    config: str
    outputs: str = "-"
    grads: str = "-"
    forward: str = "-"
    backward: str = "-"
    names: str = "-"
    checker: str = "-"
    lie: str = "-"
    seconds: str = "-"
    ok: bool = True
    notes: list[str] = field(default_factory=list)  # the checker's, overlay side
    details: list[str] = field(default_factory=list)

    def fail(self, detail: str) -> None:
        self.ok = False
        self.details.append(detail)


def run_sides(python: str, models, configs, out: Path, timeout: int) -> dict[str, str]:
    """Both sides at once, one process (and 2 ranks) each; {side: error} for a side that died."""
    commands = {}
    for side, switch in (("stock", "0"), ("overlay", "1")):
        env = dict(os.environ, THUNDER_OVERLAY=switch, PYTHONHASHSEED=names.HASH_SEED, PYTHONWARNINGS="ignore")
        cmd = [python, str(HERE / "distributed_capture.py"), str(out / side), "--models", *models,
               "--configs", *configs]
        commands[side] = (cmd, env)
    return {side: f"rc {rc}: {(out_ + err).strip()[-1500:]}"
            for side, (rc, out_, err) in run_both(commands, timeout).items() if rc != 0}


def _bitwise(a, b) -> bool:
    import torch

    if a is None or b is None:
        return a is None and b is None
    return a.dtype == b.dtype and a.shape == b.shape and torch.equal(a.view(torch.uint8), b.view(torch.uint8))


def _load(out: Path, side: str, model: str, config: str, rank: int):
    import torch

    stem = out / side / f"{model}.{config}.rank{rank}"
    record = json.loads(Path(f"{stem}.json").read_text()) if Path(f"{stem}.json").is_file() else None
    tensors = torch.load(f"{stem}.pt") if Path(f"{stem}.pt").is_file() else None
    return record, tensors


def judge(row: Row, out: Path, thunder_locals: set[str]) -> None:
    counts = dict.fromkeys(("outputs", "grads", "forward", "backward", "checker", "lie"), 0)
    renamed = {"forward": 0, "backward": 0}
    stock_named = overlay_named = lost = 0
    seconds = 0.0
    for rank in range(WORLD_SIZE):
        (s, s_t), (o, o_t) = (_load(out, side, row.model, row.config, rank) for side in ("stock", "overlay"))
        if s is None or o is None or "error" in s or "error" in o:
            for side, r in (("stock", s), ("overlay", o)):
                if r is None or "error" in r:
                    row.fail(f"rank {rank} {side}: " + (r["error"] if r else "no result"))
            continue
        seconds = max(seconds, s["seconds"], o["seconds"])
        counts["outputs"] += _bitwise(s_t["output"], o_t["output"])
        same_grads = s_t["grads"].keys() == o_t["grads"].keys() and all(
            _bitwise(g, o_t["grads"][n]) for n, g in s_t["grads"].items())
        counts["grads"] += same_grads
        if not same_grads:
            row.fail(f"rank {rank}: gradients differ: "
                     + ", ".join(n for n, g in s_t["grads"].items() if not _bitwise(g, o_t["grads"].get(n))))
        if not _bitwise(s_t["output"], o_t["output"]):
            row.fail(f"rank {rank}: outputs differ")
        for which in ("forward", "backward"):
            st, ot = s[which], o[which]
            if (st is None) != (ot is None):
                row.fail(f"rank {rank}: only one side has a {which} trace")
                continue
            if st is None:
                counts[which] += 1
                continue
            m = equivalence.match(st["text"], st["proxies"], ot["text"], ot["proxies"])
            renamed[which] += len(m.renaming)
            if m.difference is None:
                counts[which] += 1
            else:
                row.fail(f"rank {rank}: {which} trace, {m.difference}\n{equivalence.short_diff(st['text'], ot['text'])}")
        c = names.compare(f"{row.model}.{row.config}", {"ok": True, "traces": [s["names"]]},
                          {"ok": True, "traces": [o["names"]]}, thunder_locals)
        stock_named, overlay_named = stock_named + c.stock_named, overlay_named + c.overlay_named
        lost += len(c.lost) + len(c.later)
        if c.error or c.lost or c.later:
            row.fail(f"rank {rank}: names: {c.error or ''} lost {names._pairs(c.lost + c.later)}")
        checker_ok = s["checker"]["ok"] and o["checker"]["ok"]
        counts["checker"] += checker_ok
        for side, r in (("stock", s), ("overlay", o)):
            if not r["checker"]["ok"]:
                row.fail(f"rank {rank} {side}: check_traces: {r['checker']['error']}")
        if o["checker"].get("notes") != s["checker"].get("notes"):
            row.details.append(f"rank {rank}: the checker's notes differ: stock {s['checker'].get('notes')}, "
                               f"overlay {o['checker'].get('notes')}")
        row.notes = o["checker"].get("notes") or row.notes
        counts["lie"] += o["lie"]["caught"] and s["lie"]["caught"]
        if not (o["lie"]["caught"] and s["lie"]["caught"]):
            row.fail(f"rank {rank}: planted dtype lie not caught: stock {s['lie']['message']}; overlay {o['lie']['message']}")
    n = WORLD_SIZE
    row.outputs = f"bitwise {counts['outputs']}/{n}"
    row.grads = f"bitwise {counts['grads']}/{n}"
    row.forward = f"{counts['forward']}/{n} ({renamed['forward']} renamed)"
    row.backward = f"{counts['backward']}/{n} ({renamed['backward']} renamed)"
    row.names = f"{stock_named}/{overlay_named}/{lost}"
    row.checker = f"pass {counts['checker']}/{n}"
    row.lie = f"caught {counts['lie']}/{n}"
    row.seconds = f"{seconds:.1f}"


def print_table(rows: list[Row]) -> None:
    header = ("model", "config", "outputs", "gradients", "fwd trace = stock", "bwd trace = stock",
              "names stock/overlay/lost", "check_traces", "dtype lie", "s/rank", "verdict")
    table = [(r.model, r.config, r.outputs, r.grads, r.forward, r.backward, r.names, r.checker, r.lie, r.seconds,
              "identical" if r.ok else "DIFFERENT") for r in rows]
    print_rows(header, table)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0], epilog=__doc__.split("\n\n", 1)[1],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", nargs="+", choices=MODELS, default=list(MODELS))
    parser.add_argument("--configs", nargs="+", choices=CONFIGS, default=list(CONFIGS))
    parser.add_argument("--quick", action="store_true", help=f"only {', '.join(QUICK_CONFIGS)} (CI)")
    parser.add_argument("--python", default=sys.executable, help="interpreter of the sides (default: this one)")
    parser.add_argument("--out", type=Path, help="keep each rank's records here (default: a temporary folder)")
    parser.add_argument("--timeout", type=int, default=1800, help="seconds per side")
    opts = parser.parse_args(argv)
    configs = list(QUICK_CONFIGS) if opts.quick else opts.configs

    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="thunder-overlay-distributed-") as tmp:
        out = opts.out or Path(tmp)
        print(f"distributed_identity: {len(opts.models)} model(s) x {len(configs)} configuration(s), {WORLD_SIZE} "
              f"ranks on gloo per side; stock THUNDER_OVERLAY=0 and overlay THUNDER_OVERLAY=1 at once", flush=True)
        died = run_sides(opts.python, opts.models, configs, out, opts.timeout)
        sides = {}
        for side in ("stock", "overlay"):
            path = out / side / "side.json"
            sides[side] = json.loads(path.read_text()) if path.is_file() else {}
        rows = []
        for model in opts.models:
            for config in configs:
                row = Row(model, config)
                judge(row, out, set(sides["stock"].get("thunder_locals", ())))
                rows.append(row)
    wall = time.perf_counter() - started

    problems = [f"{side} side died: {why}" for side, why in died.items()]
    if sides["overlay"].get("state") != "patched":
        problems.append(f"the overlay side ran {sides['overlay'].get('state', 'nothing')!r}, not 'patched'")
    if sides["stock"].get("state") not in (None, "disabled"):
        problems.append(f"the stock side ran {sides['stock'].get('state')!r}, not 'disabled'")
    meta = sides["overlay"] or sides["stock"]
    print(f"\nthunder {meta.get('thunder')}, torch {meta.get('torch')}, Python {meta.get('python')}; "
          f"stock {sides['stock'].get('state')}, overlay {sides['overlay'].get('state')}\n")
    print_table(rows)
    shown = set()
    for row in rows:
        if row.notes and row.model not in shown:
            shown.add(row.model)
            print(f"\ncheck_traces' notes, {row.model} / {row.config} (every FSDP configuration, both sides):")
            for note in row.notes:
                print("  " + note)
    for row in rows:
        if row.details:
            print(f"\n{row.model} / {row.config}: {'identical' if row.ok else 'DIFFERENT'}")
            for d in row.details:
                print("  " + d.replace("\n", "\n    "))
    for p in problems:
        print(f"\ndistributed_identity: {p}")
    ok = not problems and all(r.ok for r in rows)
    print(f"\ndistributed_identity: {'identical to stock, checker passing, lies caught' if ok else 'DIFFERENT (see above)'}"
          f" on {len(rows)} configuration(s) x {WORLD_SIZE} ranks; wall time {wall:.0f} s (exit {0 if ok else 1})")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
