"""Run by test_distributed_checker.py as a script: 2 ranks on gloo (CPU), each checking real ddp / fsdp traces.

    python tests/distributed_ranks.py OUT_DIR CONFIG [CONFIG ...]

For each configuration (ddp, fsdp-zero2-none, fsdp-zero3-block, ...) each rank jits a small module with named
values, runs a forward and backward, and writes OUT_DIR/<config>.rank<R>.json with what the test asserts:
check_traces' verdict and notes; what the checker says of the earliest computation trace as thunder keeps it;
whether that trace shares its parameter proxies with the FSDP pass's trace; whether dtype lies planted in the
final forward and backward traces, and in the earliest computation trace, are caught.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import traceback
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))


def caught(fn) -> str | None:
    from thunder_overlay import TraceCheckError

    try:
        fn()
    except TraceCheckError as e:
        return str(e).splitlines()[0]
    return None


def one(config: str, rank: int) -> dict:
    import thunder
    import torch
    from distributed_capture import named_module, wrap
    from thunder_overlay import check_trace, check_traces
    from thunder_overlay.checks import with_wrong_dtype

    torch.manual_seed(0)
    jfn = wrap(thunder.jit(named_module()), config)
    torch.manual_seed(100 + rank)
    jfn(torch.randn(4, 16)).square().mean().backward()
    cd = thunder.compile_data(jfn)
    computations = thunder.last_traces(jfn)
    result: dict = {"state": __import__("thunder_overlay").status()["state"]}
    report = check_traces(jfn)
    result.update(rerun=report.rerun, traces=report.traces, notes=report.notes)
    result["earliest_as_kept"] = caught(lambda: check_trace(computations[0], cd))
    provenances = [str(t.get_provenance()) for t in computations]
    fsdp_pass = next((i for i, p in enumerate(provenances) if "fsdp pass" in p), None)
    result["fsdp_pass_trace"] = fsdp_pass
    if fsdp_pass is not None:
        ours = {a.name: a for a in computations[fsdp_pass].args}
        result["shared_sharded_proxies"] = [
            (a.name, list(a.shape)) for a in computations[0].args if ours.get(a.name) is a
        ]
    result["lie_forward"] = caught(lambda: check_trace(with_wrong_dtype(computations[-1])[0], cd))
    result["lie_backward"] = caught(lambda: check_trace(with_wrong_dtype(thunder.last_backward_traces(jfn)[-1])[0], cd))
    # a lie in the earliest trace, where thunder's FSDP pass left sharded shapes: still caught by check_traces
    computations[0] = with_wrong_dtype(computations[0])[0]
    result["lie_earliest"] = caught(lambda: check_traces(jfn))
    return result


def rank_main(rank: int, store: str, out: str, configs: list[str]) -> None:
    import warnings

    warnings.filterwarnings("ignore")
    import torch.distributed as tdist

    tdist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=2)
    try:
        for config in configs:
            try:
                result = one(config, rank)
            except Exception:
                result = {"error": traceback.format_exc()[-3000:]}
            Path(out, f"{config}.rank{rank}.json").write_text(json.dumps(result))
            tdist.barrier()
    finally:
        tdist.destroy_process_group()


if __name__ == "__main__":
    import torch.multiprocessing as mp

    out, configs = sys.argv[1], sys.argv[2:]
    with tempfile.TemporaryDirectory() as tmp:
        mp.spawn(rank_main, args=(os.path.join(tmp, "store"), out, configs), nprocs=2, join=True)
