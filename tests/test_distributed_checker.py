"""check_traces on real ddp / fsdp programs: 2 ranks on gloo (CPU), stock and overlay alike.

thunder's FSDP pass (FSDPTransform.transform_traces_pre_prologue, thunder/distributed/transforms/fsdp_v2.py)
sets the sharded shape on the computation trace's parameter proxies in place (``comp_inp_p._shape =
tuple(new_shape)``); the computation traces kept from before the pass hold the same proxy objects, so as
thunder keeps them they are inconsistent: a linear of an unsharded weight recorded against a sharded one. The
checker says so in its notes and checks those traces at the shapes they were traced with; a dtype lie planted
in the final forward or backward trace, or in the earliest trace, is still caught.
"""

from __future__ import annotations

import json
import sys

import pytest

from conftest import REPO, run_python

RANKS = REPO / "tests" / "distributed_ranks.py"
CONFIGS = ("ddp", "fsdp-zero2-none", "fsdp-zero3-block")


@pytest.fixture(scope="module", params=["0", "1"], ids=["stock", "overlay"])
def ranks(request, tmp_path_factory):
    out = tmp_path_factory.mktemp(f"ranks-{request.param}")
    proc = run_python(f"import runpy, sys; sys.argv = {[str(RANKS), str(out), *CONFIGS]!r}; "
                      f"runpy.run_path({str(RANKS)!r}, run_name='__main__')", overlay=request.param, timeout=900)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    results = {}
    for config in CONFIGS:
        for rank in (0, 1):
            results[config, rank] = json.loads((out / f"{config}.rank{rank}.json").read_text())
            assert "error" not in results[config, rank], results[config, rank]["error"]
    return request.param, results


pytestmark = [pytest.mark.slow, pytest.mark.skipif(sys.platform != "linux", reason="gloo ranks: Linux only here")]


@pytest.mark.parametrize("config", [c for c in CONFIGS if c.startswith("fsdp")])
def test_fsdp_programs_pass_with_the_earlier_traces_named(ranks, config):
    overlay, results = ranks
    for rank in (0, 1):
        r = results[config, rank]
        assert r["state"] == ("patched" if overlay == "1" else "disabled")
        assert r["rerun"] > 0
        # the traces before the pass are named, with the thunder code that made them so
        (note,) = r["notes"]
        assert "trace(s) " in note and "fsdp_v2.py" in note and "comp_inp_p._shape" in note, note
        assert "the final ones included, as thunder keeps them" in note
        # thunder's doing: the earliest trace shares the sharded proxies with the pass's trace...
        assert r["fsdp_pass_trace"] is not None and r["fsdp_pass_trace"] > 0
        shared = dict((name, tuple(shape)) for name, shape in r["shared_sharded_proxies"])
        assert shared["t_fc1_weight"] == (16, 16) and shared["t_fc2_weight"] == (8, 32), shared
        # ...so, as thunder keeps it, it records the unsharded linear against the sharded weight
        assert r["earliest_as_kept"] and "is recorded with shape" in r["earliest_as_kept"], r["earliest_as_kept"]


@pytest.mark.parametrize("config", CONFIGS)
def test_planted_dtype_lies_are_caught(ranks, config):
    _, results = ranks
    for rank in (0, 1):
        r = results[config, rank]
        for where in ("lie_forward", "lie_backward", "lie_earliest"):
            assert r[where] and "is recorded with dtype" in r[where], (where, r[where])


def test_ddp_needs_no_notes(ranks):
    _, results = ranks
    for rank in (0, 1):
        r = results["ddp", rank]
        assert r["notes"] == [] and r["fsdp_pass_trace"] is None and r["earliest_as_kept"] is None
