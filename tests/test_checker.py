"""check_traces holds on every trace thunder gives for real models (stock and overlay alike: it checks
traces, not the patch) and says what it checked, the names across the traces of a call included (I9, and I10
where the jit traced while ``checks.recording_bindings()`` recorded); a corrupted trace still fails.

The models are built from configs with random weights, 2 layers: HF Llama, Mistral and Gemma (their
rotary embeddings run under ``torch.autocast(..., enabled=False)``, which puts autocast_enter/exit in
the trace), litgpt Gemma (``torch.tensor`` for its embedding scale, a factory symbol that reads
thunder's cache information) and the smallest program with an autocast region.
"""

import re
import sys

import pytest
import torch
import thunder
from thunder.core.proxies import TensorProxy, variableify
from thunder.core.trace import from_trace, tracectx

from thunder_overlay import TraceCheckError, check_trace, check_traces, checks

from conftest import REPO

sys.path.insert(0, str(REPO / "tools"))
import check_models  # noqa: E402  (the model shapes tools/check_models.py checks)


def autocast_region(x):
    with torch.autocast("cpu", enabled=False):
        y = x.float() * 2
    return y + 1


def autocast_region_enabled(x, w):
    with torch.autocast("cpu", dtype=torch.bfloat16):
        y = torch.nn.functional.gelu(x @ w)
    return y.float().sum()


def hf(kind: str):
    pytest.importorskip("transformers")
    cls, config = {name: (cls, config) for name, cls, config in check_models.hf_models()}[kind]
    torch.manual_seed(0)
    return cls(config).eval().requires_grad_(False), torch.randint(0, 128, (1, 8))


def litgpt_gemma():
    from thunder.tests import litgpt_model

    torch.manual_seed(0)
    model = litgpt_model.GPT(check_models.litgpt_config("gemma-2b")).eval().requires_grad_(False)
    return model, torch.randint(0, 128, (1, 8))


def symbol_names(jfn) -> set[str]:
    traces = [*thunder.last_prologue_traces(jfn), *thunder.last_traces(jfn), *(thunder.last_backward_traces(jfn) or [])]
    return {b.sym.name for t in traces for b in t.bound_symbols}


def checked(jfn, *args, **kwargs):
    # traced while the bindings are recorded: check_traces also checks I9 and I10 (the names across the traces)
    with checks.recording_bindings():
        out = jfn(*args, **kwargs)
        report = check_traces(jfn)
    assert report.across == ["I9", "I10"]
    assert report.traces == len(thunder.last_prologue_traces(jfn)) + len(thunder.last_traces(jfn)) + len(
        thunder.last_backward_traces(jfn) or []
    )
    assert report.rerun > 0 and "unpack_trivial" in report.not_recomputed
    assert f"{report.rerun} symbols re-run" in str(report)
    return out, report


def test_an_autocast_region_is_re_run_with_its_context():
    x = torch.randn(2, 2)
    jfn = thunder.jit(autocast_region)
    out, _ = checked(jfn, x)
    torch.testing.assert_close(out, autocast_region(x))
    assert {"autocast_enter", "autocast_exit"} <= symbol_names(jfn)


def test_an_enabled_autocast_region_with_gradients():
    x, w = torch.randn(4, 4, requires_grad=True), torch.randn(4, 4, requires_grad=True)
    jfn = thunder.jit(autocast_region_enabled)
    out, _ = checked(jfn, x, w)
    out.backward()
    assert thunder.last_backward_traces(jfn)
    check_traces(jfn)


def test_a_trace_checked_on_its_own_gets_a_context_of_its_own():
    jfn = thunder.jit(autocast_region)
    jfn(torch.randn(2, 2))
    for trace in thunder.last_traces(jfn):
        check_trace(trace)


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["Llama", "Mistral", "Gemma"])
def test_hf_models(kind):
    model, ids = hf(kind)
    jfn = thunder.jit(model)
    out, _ = checked(jfn, ids)
    torch.testing.assert_close(out.logits, model(ids).logits)
    assert "autocast_enter" in symbol_names(jfn)


# Measured: on 0.2.1 and 0.2.2, stock and overlay alike, the augmented forward trace of a model with
# gradients gives two number proxies of different types one name ('a' or 'b', by hash seed) inside
# subsymbols; the checker reports that I2 finding. thunder's autodiff of 0.2.3+ does not.
OLD_AUTODIFF = tuple(map(int, re.match(r"(\d+)\.(\d+)\.(\d+)", thunder.__version__).groups())) < (0, 2, 3)


@pytest.mark.xfail(OLD_AUTODIFF, reason="thunder 0.2.1/0.2.2's augmented forward pass shares a name between "
                   "two number proxies (stock too)", strict=False)
@pytest.mark.slow
def test_hf_llama_with_gradients():
    model, ids = hf("Llama")
    model.train().requires_grad_(True)
    jfn = thunder.jit(model)
    out, _ = checked(jfn, ids)
    out.logits.square().mean().backward()
    check_traces(jfn)


@pytest.mark.slow
def test_litgpt_gemma():
    model, ids = litgpt_gemma()
    jfn = thunder.jit(model)
    out, _ = checked(jfn, ids)
    torch.testing.assert_close(out, model(ids))
    assert "tensor" in {b.sym.name for t in thunder.last_traces(jfn)[:1] for b in t.bound_symbols}


@pytest.mark.slow
def test_a_proxy_with_a_wrong_dtype_in_a_real_model_still_fails():
    model, ids = hf("Llama")
    jfn = thunder.jit(model)
    jfn(ids)
    trace = thunder.last_traces(jfn)[0]
    compile_data = thunder.compile_data(jfn)
    check_trace(trace, compile_data)
    # The first float32 output of a symbol between the two autocast regions' ends: recorded as bfloat16.
    producer = next(b for b in trace.bound_symbols if b.sym.name == "matmul" and b.output.dtype == thunder.float32)
    out = producer.output
    with tracectx(trace):
        wrong = TensorProxy(like=out, dtype=thunder.bfloat16, name=f"{out.name}_wrong")
    bad = from_trace(trace)
    bad.bound_symbols = [b.from_bsym_swap_proxies({variableify(out): wrong}) for b in trace.bound_symbols]
    with pytest.raises(TraceCheckError, match=rf"proxy {wrong.name} is recorded with dtype .*bfloat16.* matmul computes .*float32"):
        check_trace(bad, compile_data)
