"""The overlay changes names only: where stock thunder traces a program correctly, the overlay's
prologue, computation, and forward and backward execution traces are stock's up to a consistent renaming of proxies.
This is why execution time cannot differ (the benchmarks measure it anyway)."""

import json

import pytest

from thunder_overlay import equivalence

from conftest import requires_overlay, run_python

# Stock and overlay each compile models in processes of their own: minutes
pytestmark = pytest.mark.slow

TRACES = """
import json, torch, thunder
from thunder.tests import nanogpt_model
from thunder_overlay.equivalence import describe
from thunder_overlay.reproducers.seed_946_names import func as seed_946


def traces(jfn):
    out = {"prologue": thunder.last_prologue_traces(jfn)[-1], "computation": thunder.last_traces(jfn)[0],
           "forward": thunder.last_traces(jfn)[-1]}
    backward = thunder.last_backward_traces(jfn)
    if backward:
        out["backward"] = backward[-1]
    return {which: describe(trace) for which, trace in out.items()}


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
        proc = run_python(TRACES, overlay=overlay)
        assert proc.returncode == 0, proc.stderr[-3000:]
        sides[side] = json.loads(proc.stdout.strip().splitlines()[-1])
    return sides


def matched(both_sides, program, trace) -> equivalence.Match:
    stock, overlay = both_sides["stock"][program][trace], both_sides["overlay"][program][trace]
    return equivalence.match(stock["text"], stock["proxies"], overlay["text"], overlay["proxies"])


@pytest.mark.parametrize("program, trace", [
    ("nanogpt", "prologue"), ("nanogpt", "computation"), ("nanogpt", "forward"), ("nanogpt", "backward"),
    ("seed_946_retrace", "prologue"), ("seed_946_retrace", "computation"), ("seed_946_retrace", "forward"),
])
def test_same_program_up_to_names(both_sides, program, trace):
    stock = both_sides["stock"][program][trace]
    assert len(stock["proxies"]) > 1 and stock["text"].count("\n") > 5
    result = matched(both_sides, program, trace)
    assert result.difference is None, f"{program} {trace}: {result.difference}"


@requires_overlay
def test_the_comparison_sees_through_names(both_sides):
    """The #946 round trip is named differently by stock and overlay, yet compares equal above."""
    assert matched(both_sides, "seed_946_retrace", "computation").renaming
