"""Child of distributed_identity.py: one side (stock or overlay, by THUNDER_OVERLAY) of the distributed check.

    python bench/distributed_capture.py OUT_DIR --models named llama2-like --configs ddp fsdp-zero2-none ...

Starts 2 ranks with torch.multiprocessing on gloo (one process group, for every configuration of this side).
For each model and configuration each rank builds the model from one seed, wraps it (``ddp(thunder.jit(m))``
or ``fsdp(thunder.jit(m), device=cpu, ...)``), runs one forward and backward on inputs of its own, and
writes to OUT_DIR/<model>.<config>.rank<R>.{pt,json}: the outputs and gradients; the final forward and
backward trace texts with their proxy names; the initial trace's description for ``thunder-overlay names``
(overlay side: every name the program bound each value to); ``thunder_overlay.check_traces``'s verdict;
and whether the checker catches a dtype lie planted in the final forward trace.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
import traceback
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

WORLD_SIZE = 2
MODELS = ("named", "llama2-like")
CONFIGS = (
    "ddp",
    "fsdp-zero2-none",
    "fsdp-zero2-layer",
    "fsdp-zero2-block",
    "fsdp-zero3-none",
    "fsdp-zero3-layer",
    "fsdp-zero3-block",
)


def named_module():
    """A module whose forward names its values; fc2's 15 rows do not split in two, so FSDP pads them."""
    import torch

    class Named(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.fc1 = torch.nn.Linear(16, 32)
            self.norm = torch.nn.LayerNorm(32)
            self.fc2 = torch.nn.Linear(32, 15)

        def forward(self, x):
            hidden = self.fc1(x)
            normed = self.norm(hidden)
            activated = torch.nn.functional.gelu(normed)
            scaled = activated * 0.5
            logits = self.fc2(scaled)
            return logits

    return Named()


def build(model: str, rank: int):
    """(module, inputs): the module from one seed on every rank and side, the inputs per rank."""
    import torch

    torch.manual_seed(0)
    if model == "named":
        module = named_module()
        torch.manual_seed(100 + rank)
        return module, (torch.randn(4, 16),)
    if model == "llama2-like":
        from thunder.tests import litgpt_model

        config = litgpt_model.Config.from_name("llama2-like", n_layer=2)
        module = litgpt_model.GPT(config)
        torch.manual_seed(100 + rank)
        return module, (torch.randint(0, config.padded_vocab_size, (2, 16)),)
    raise ValueError(f"unknown model {model!r}")


def wrap(jitted, config: str, device: str = "cpu", broadcast_from: int | None = 0):
    """``ddp(jitted)`` or ``fsdp(jitted, device=...)`` with the configuration's sharding and bucketing."""
    import torch
    from thunder.distributed import FSDPBucketingStrategy, FSDPType, ddp, fsdp

    if config == "ddp":
        return ddp(jitted, broadcast_from=broadcast_from)
    _, zero, bucketing = config.split("-")
    return fsdp(
        jitted,
        device=torch.device(device),
        sharding_strategy=FSDPType[zero.upper()],
        bucketing_strategy=FSDPBucketingStrategy[bucketing.upper()],
    )


def _trace_record(trace) -> dict:
    from fusion_capture import proxy_names

    return {"text": str(trace), "proxies": proxy_names(trace)}


def checker_verdict(jfn) -> dict:
    from thunder_overlay import TraceCheckError, check_traces

    try:
        report = check_traces(jfn)
    except TraceCheckError as e:
        return {"ok": False, "error": str(e).splitlines()[0][:500]}
    return {"ok": True, "report": str(report), "notes": list(report.notes)}


def lie_verdict(jfn) -> dict:
    """The final forward trace with one output recorded in a wrong dtype: the checker must refuse it."""
    import thunder
    from thunder_overlay import TraceCheckError, check_trace
    from thunder_overlay.checks import with_wrong_dtype

    bad, name = with_wrong_dtype(thunder.last_traces(jfn)[-1])
    try:
        check_trace(bad, thunder.compile_data(jfn))
    except TraceCheckError as e:
        return {"caught": "dtype" in str(e) and name in str(e), "message": str(e).splitlines()[0][:300]}
    return {"caught": False, "message": f"the checker passed a trace with {name} in the wrong dtype"}


def run_case(model: str, config: str, rank: int, capture, out_dir: Path) -> None:
    import thunder
    import torch
    from thunder_overlay import names

    stem = out_dir / f"{model}.{config}.rank{rank}"
    record: dict = {"model": model, "config": config, "rank": rank}
    started = time.perf_counter()
    try:
        module, args = build(model, rank)
        jfn = wrap(thunder.jit(module), config)
        capture.calls.clear()
        out = jfn(*args)
        out.float().square().mean().backward()
        grads = {n: p.grad for n, p in jfn.named_parameters()}
        torch.save({"output": out.detach(), "grads": grads}, f"{stem}.pt")
        record["forward"] = _trace_record(thunder.last_traces(jfn)[-1])
        backward = thunder.last_backward_traces(jfn)
        record["backward"] = _trace_record(backward[-1]) if backward else None
        record["names"] = names.trace_record(thunder.last_traces(jfn)[0], capture)
        record["checker"] = checker_verdict(jfn)
        record["lie"] = lie_verdict(jfn)
    except Exception as e:
        record["error"] = f"{type(e).__name__}: {e}".splitlines()[0][:1000]
        record["traceback"] = traceback.format_exc()[-4000:]
    record["seconds"] = round(time.perf_counter() - started, 2)
    Path(f"{stem}.json").write_text(json.dumps(record))


def rank_main(rank: int, store: str, out_dir: str, models: list[str], configs: list[str]) -> None:
    import warnings

    warnings.filterwarnings("ignore")
    os.environ.update(LOCAL_RANK=str(rank), RANK=str(rank), WORLD_SIZE=str(WORLD_SIZE))
    import torch
    import torch.distributed as tdist

    torch.set_num_threads(1)
    import thunder.core.jit_ext  # noqa: F401  (patched now, unless THUNDER_OVERLAY=0)
    import thunder_overlay
    from thunder_overlay import names

    tdist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=WORLD_SIZE)
    out = Path(out_dir)
    try:
        capture = names._BindingCapture()
        if rank == 0:
            meta = {"state": thunder_overlay.status()["state"], "torch": torch.__version__,
                    "thunder": thunder.__version__, "python": sys.version.split()[0],
                    "thunder_locals": sorted(names._thunder_local_names())}
            (out / "side.json").write_text(json.dumps(meta))
        for model in models:
            for config in configs:
                run_case(model, config, rank, capture, out)
                tdist.barrier()
    finally:
        tdist.destroy_process_group()


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out_dir", type=Path)
    parser.add_argument("--models", nargs="+", choices=MODELS, default=list(MODELS))
    parser.add_argument("--configs", nargs="+", choices=CONFIGS, default=list(CONFIGS))
    opts = parser.parse_args(argv)
    opts.out_dir.mkdir(parents=True, exist_ok=True)

    import torch.multiprocessing as mp

    with tempfile.TemporaryDirectory(prefix="thunder-overlay-dist-") as tmp:
        # a file store: no TCP port that another run on this machine could hold
        mp.spawn(rank_main, args=(os.path.join(tmp, "store"), str(opts.out_dir), opts.models, opts.configs),
                 nprocs=WORLD_SIZE, join=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
