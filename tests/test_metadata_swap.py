"""Patch 0001 (upstream #283): a rename only reaches the proxy it was recorded for.

Programs run under the overlay in this process (the start-up hook patched jit_ext) and under stock
thunder in a THUNDER_OVERLAY=0 subprocess, which must fail: that proves the patch is what fixes them.
"""

import re

import pytest
import torch
import thunder
from thunder.transforms.autocast import autocast

from thunder_overlay import TraceCheckError, check_trace, check_traces
from thunder_overlay.reproducers import load
from thunder_overlay.reproducers._common import assert_close, float64_copies, inputs

from conftest import requires_overlay, run_python

pytestmark = requires_overlay


def chain(a, b, c):
    u = a @ b
    v = u @ c
    return v + c


def seed(a, b, c):
    return (a @ b) + c


def stock_outcome(program: str) -> str:
    proc = run_python(f"from thunder_overlay.reproducers import load; print(load({program!r}).run())", overlay="0")
    return "pass" if proc.returncode == 0 else proc.stderr.strip().splitlines()[-1]


# float16 takes the code paths of bfloat16 (the other dtype is the slow run's); the chain holds seed_283's
# matmul-then-add and casts a matmul's output into a second one, so the fast run jits the chain only
@pytest.mark.parametrize("dtype", ["bfloat16", pytest.param("float16", marks=pytest.mark.slow)])
@pytest.mark.parametrize("fn", [pytest.param(seed, marks=pytest.mark.slow), chain], ids=["seed_283", "chain"])
def test_autocast_programs_run_match_float64_and_pass_the_checker(fn, dtype):
    args = inputs(3)
    jfn = thunder.jit(autocast(fn, dtype=getattr(thunder, dtype)))
    assert_close(jfn(*args), fn(*float64_copies(args)), dtype)
    assert check_traces(jfn).traces >= 3
    assert jfn(*args).dtype == torch.float32


@pytest.mark.slow
def test_chain_forward_backward_matches_float64_gradients():
    detail = load("autocast_chain_grad").run()
    assert "traces checked" in detail


@pytest.mark.slow
@pytest.mark.parametrize("program", ["autocast_chain", "autocast_chain_grad"])
def test_stock_thunder_fails_the_chain(program):
    outcome = stock_outcome(program)
    assert re.search(r"Expected a.dtype=\S*float32 and b.dtype=\S*bfloat16", outcome), outcome


@pytest.mark.slow
def test_stock_thunder_on_seed_283_as_reported():
    outcome = stock_outcome("seed_283_autocast")
    if outcome == "pass":
        pytest.skip(
            f"stock thunder {thunder.__version__} passes the program exactly as reported in #283 (its generated "
            "names shifted); the chain tests above show the same defect failing stock"
        )
    assert re.search(r"Expected a.dtype=\S*float32 and b.dtype=\S*bfloat16", outcome), outcome


def test_checker_names_proxy_symbol_and_both_dtypes_of_a_mislabelled_trace():
    args = inputs(3)
    jfn = thunder.jit(autocast(chain, dtype=thunder.bfloat16))
    jfn(*args)
    trace = thunder.last_traces(jfn)[0]
    convert = next(b for b in trace.bound_symbols if b.sym.name == "convert_element_type")
    out = convert.output
    # What #283 did: give the bfloat16 output the metadata of a float32 proxy of the same name.
    with thunder.core.trace.tracectx(trace):
        mislabelled = thunder.core.proxies.TensorProxy(like=out, dtype=thunder.float32, name=f"{out.name}_f32")
    bad = thunder.core.trace.from_trace(trace)
    bad.bound_symbols = [b.from_bsym_swap_proxies({thunder.core.proxies.variableify(out): mislabelled}) for b in trace.bound_symbols]
    with pytest.raises(TraceCheckError, match=rf"proxy {mislabelled.name} is recorded with dtype .*float32.* convert_element_type computes .*bfloat16"):
        check_trace(bad)


def test_checker_rejects_two_proxies_with_one_name():
    args = inputs(3)
    jfn = thunder.jit(chain)
    jfn(*args)
    trace = thunder.last_traces(jfn)[0]
    first, second = [b for b in trace.bound_symbols if b.sym.name == "matmul"][:2]
    bad = thunder.core.trace.from_trace(trace)
    with thunder.core.trace.tracectx(bad):
        twin = thunder.core.proxies.TensorProxy(like=second.output, dtype=thunder.float64, name="twin_tmp")
    twin._name = first.output.name
    bad.bound_symbols = [
        b.from_bsym_swap_proxies({thunder.core.proxies.variableify(second.output): twin}) for b in trace.bound_symbols
    ]
    with pytest.raises(TraceCheckError, match=rf"name '{first.output.name}' is shared by two different proxies"):
        check_trace(bad)
