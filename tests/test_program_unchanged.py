"""The overlay changes names only: where stock thunder traces a program correctly, the overlay's
prologue, computation, and forward and backward execution traces are stock's up to a consistent renaming of proxies.
This is why execution time cannot differ (the benchmarks measure it anyway)."""

import json

import pytest

from conftest import requires_overlay, run_python

SHAPES = """
import json, torch, thunder
from thunder.core.proxies import Proxy, TensorProxy
from thunder.core.pytree import tree_flatten
from thunder.tests import nanogpt_model
from thunder_overlay.reproducers.seed_946_names import func as seed_946


def shape(trace):
    '''Every bound symbol with proxies replaced by their order of first appearance and metadata.'''
    order = {}

    def canon(x):
        if not isinstance(x, Proxy):
            return repr(x)
        meta = f"{x.dtype}{list(x.shape)}" if isinstance(x, TensorProxy) else type(x).__name__
        return f"%{order.setdefault(x.name, len(order))}:{meta}"

    lines = []
    for bsym in trace.bound_symbols:
        args, _ = tree_flatten((bsym.args, bsym.kwargs))
        outs, _ = tree_flatten(bsym.output)
        lines.append(f"{bsym.sym.name}({', '.join(map(canon, args))}) -> {', '.join(map(canon, outs))}")
    return {"shape": lines, "names": sorted(order)}


def traces(jfn):
    out = {"prologue": shape(thunder.last_prologue_traces(jfn)[-1]), "computation": shape(thunder.last_traces(jfn)[0]),
           "forward": shape(thunder.last_traces(jfn)[-1])}
    backward = thunder.last_backward_traces(jfn)
    if backward:
        out["backward"] = shape(backward[-1])
    return out


torch.manual_seed(0)
config = nanogpt_model.GPTConfig(block_size=64, vocab_size=320, n_layer=2, n_head=4, n_embd=64, dropout=0.0)
model = nanogpt_model.GPT(config)
jmodel = thunder.jit(model)
logits, _ = jmodel(torch.randint(0, config.vocab_size, (2, 32)))
logits.sum().backward()

x, y = torch.randn(3, 4), torch.randn(3, 4)
retrace = thunder.jit(thunder.trace()(seed_946, x, y, "cpu").python_callable(), executors=["torch"])
retrace(x, y, device="cpu")
print(json.dumps({"nanogpt": traces(jmodel), "seed_946_retrace": traces(retrace)}))
"""


@pytest.fixture(scope="module")
def both_sides():
    sides = {}
    for side, overlay in (("stock", "0"), ("overlay", "1")):
        proc = run_python(SHAPES, overlay=overlay)
        assert proc.returncode == 0, proc.stderr[-3000:]
        sides[side] = json.loads(proc.stdout.strip().splitlines()[-1])
    return sides


@pytest.mark.parametrize("program, trace", [
    ("nanogpt", "prologue"), ("nanogpt", "computation"), ("nanogpt", "forward"), ("nanogpt", "backward"),
    ("seed_946_retrace", "prologue"), ("seed_946_retrace", "computation"), ("seed_946_retrace", "forward"),
])
def test_same_program_up_to_names(both_sides, program, trace):
    stock, overlay = both_sides["stock"][program][trace]["shape"], both_sides["overlay"][program][trace]["shape"]
    assert len(stock) > 1
    first_difference = next((i for i, (a, b) in enumerate(zip(stock, overlay)) if a != b), None)
    assert stock == overlay, (
        f"{program} {trace}: {len(stock)} vs {len(overlay)} symbols; first difference at {first_difference}:\n"
        f"  stock:   {stock[first_difference] if first_difference is not None else '-'}\n"
        f"  overlay: {overlay[first_difference] if first_difference is not None else '-'}"
    )


@requires_overlay
def test_the_comparison_sees_through_names(both_sides):
    """The #946 round trip is named differently by stock and overlay, yet compares equal above."""
    stock, overlay = (both_sides[side]["seed_946_retrace"]["computation"]["names"] for side in ("stock", "overlay"))
    assert stock != overlay
