"""Patch 0002 (upstream #946): names are allocated after tracing, user names win, thunder's own locals
never name a proxy. Stock halves run in THUNDER_OVERLAY=0 subprocesses."""

import json

import pytest
import torch
import thunder
from hypothesis import HealthCheck, given, settings, strategies as st
from thunder.transforms.autocast import autocast

from thunder_overlay import check_traces
from thunder_overlay.reproducers.seed_946_names import func as seed_946

from conftest import requires_overlay, run_python

pytestmark = requires_overlay


def op_names(trace) -> list[tuple[str, str]]:
    """(symbol, output name) of every top-level proxy-producing operation."""
    return [(b.sym.name, o.name) for b in trace.bound_symbols for o in b.flat_proxy_outs if b.sym.name != "unpack_trivial"]


def returned_names(trace) -> list[str]:
    return [p.name for p in thunder.core.pytree.tree_iter(trace.output) if isinstance(p, thunder.Proxy)]


def round_trip(fn, *args, **kwargs):
    """(the source trace, the initial computation trace of thunder.jit(source.python_callable()))."""
    source = thunder.trace()(fn, *args, **kwargs)
    jfn = thunder.jit(source.python_callable(), executors=["torch"])
    jfn(*args, **kwargs)
    return source, thunder.last_traces(jfn)[0], jfn


def test_seed_946_round_trip_keeps_every_name():
    x, y = torch.randn(3, 4), torch.randn(3, 4)
    source, jitted, jfn = round_trip(seed_946, x, y, "cpu")
    assert [n for _, n in op_names(jitted)] == [n for _, n in op_names(source)] == [f"t{i}" for i in range(8)]
    assert returned_names(jitted) == ["t4", "t5", "t6", "t7"]
    check_traces(jfn)


def test_stock_keeps_one_of_eight_names_in_seed_946():
    proc = run_python(
        """
        import json, torch, thunder
        from test_name_allocation import seed_946, op_names, round_trip
        source, jitted, _ = round_trip(seed_946, torch.randn(3, 4), torch.randn(3, 4), "cpu")
        print(json.dumps([[n for _, n in op_names(source)], [n for _, n in op_names(jitted)]]))
        """,
        overlay="0",
        env={"PYTHONPATH": str(__import__("pathlib").Path(__file__).parent)},
    )
    assert proc.returncode == 0, proc.stderr
    source, jitted = json.loads(proc.stdout.splitlines()[-1])
    assert sum(a == b for a, b in zip(source, jitted)) == 1, (source, jitted)


# thunder.trace() runs the program on proxies, so it calls thunder.torch (ltorch), not torch
UNARY = ["ltorch.tanh({})", "ltorch.exp({} * 0.1)", "{} * 2.0", "{} + 1.0", "ltorch.softmax({}, -1)", "{}.sum(-1, keepdim=True)"]
BINARY = ["{} * {}", "{} + {}", "{} - {}", "{} / ({}.abs() + 1.0)"]


@st.composite
def programs(draw):
    values, lines = ["x", "y"], []
    for _ in range(draw(st.integers(1, 10))):
        a, b = draw(st.sampled_from(values)), draw(st.sampled_from(values))
        expr = draw(st.sampled_from(BINARY)).format(a, b) if draw(st.booleans()) else draw(st.sampled_from(UNARY)).format(a)
        name = f"v{len(lines)}"
        lines.append(f"{name} = {expr}")
        values.append(name)
    outputs = draw(st.lists(st.sampled_from(values[2:]), min_size=1, max_size=3, unique=True))
    return "def program(x, y):\n    " + "\n    ".join(lines + [f"return {', '.join(outputs)},"]) + "\n"


@settings(max_examples=10, derandomize=True, deadline=None, suppress_health_check=list(HealthCheck))
@given(source_code=programs())
def test_round_trip_of_generated_programs_reproduces_every_name(source_code):
    namespace = {"ltorch": thunder.torch}
    exec(source_code, namespace)
    source, jitted, jfn = round_trip(namespace["program"], torch.randn(4, 4), torch.randn(4, 4))
    source_args = [p.name for p in source.args]
    assert [p.name for p in jitted.args] == [n for n in source_args if n in {p.name for p in jitted.args}]
    assert {p.name for p in jitted.args} <= set(source_args)  # thunder.jit drops unused inputs
    assert op_names(jitted) == op_names(source), source_code
    assert returned_names(jitted) == returned_names(source)


@pytest.mark.slow
@pytest.mark.parametrize("config", ["llama2-like", "gpt-neox-like"])
def test_round_trip_of_litgpt_initial_trace_reproduces_every_name(config):
    from litgpt import GPT
    from thunder.tests.litgpt_model import Config

    cfg = Config.from_name(config)
    cfg.n_layer = 1
    model = GPT(cfg)
    x = torch.randint(0, cfg.padded_vocab_size, (1, 8))
    jmodel = thunder.jit(model)
    jmodel(x)
    source = thunder.last_traces(jmodel)[0]
    tensors = {}
    for b in thunder.last_prologue_traces(jmodel)[0].bound_symbols:
        if b.sym.name in ("unpack_parameter", "unpack_buffer"):
            tensors[b.output.name] = model.get_parameter(b.args[1]) if b.sym.name == "unpack_parameter" else model.get_buffer(b.args[1])
    jfn = thunder.jit(source.python_callable())
    jfn(*[tensors.get(p.name, x) for p in source.args])
    jitted = thunder.last_traces(jfn)[0]
    assert [p.name for p in jitted.args] == [p.name for p in source.args]
    assert op_names(jitted) == op_names(source)


def generated_looking(x):
    t0 = torch.softmax(x, -1)
    t1 = torch.nn.functional.layer_norm(t0, (4,))
    t5 = t1 * 2
    t_2 = torch.softmax(t5, 0)
    i0 = t_2 + t0
    return i0


def ordinary(x, w):
    gate = x @ w
    up = x * 2
    act = torch.nn.functional.silu(gate)
    out = act * up
    return out


def test_user_names_shaped_like_generated_ones_are_kept():
    jfn = thunder.jit(generated_looking)
    jfn(torch.randn(3, 4))
    trace = thunder.last_traces(jfn)[0]
    names = {n for _, n in op_names(trace)}
    assert {"t0", "t1", "t5", "t_2", "i0"} <= names, trace
    check_traces(jfn)


def test_ordinary_names_stay_as_they_are():
    jfn = thunder.jit(ordinary)
    jfn(torch.randn(3, 4), torch.randn(4, 4))
    trace = thunder.last_traces(jfn)[0]
    assert [p.name for p in trace.args] == ["x", "w"]
    assert {"gate", "up", "act", "out"} <= {n for _, n in op_names(trace)}


THUNDER_LOCALS = {"result", "tree", "obj", "fn", "args", "kwargs", "res", "out", "output", "proxy", "bsym"}


def autocast_chain(a, b, c):
    u = a @ b
    v = u @ c
    return v + c


def test_autocast_trace_uses_user_arguments_and_no_thunder_locals():
    jfn = thunder.jit(autocast(autocast_chain, dtype=thunder.bfloat16))
    jfn(*(torch.randn(2, 2) for _ in range(3)))
    traces = thunder.last_traces(jfn)
    for trace in traces:  # the initial trace and every trace a pass made of it
        named = {n for _, n in op_names(trace)} | {p.name for p in trace.args}
        assert not named & THUNDER_LOCALS, trace
    trace = traces[0]
    assert [p.name for p in trace.args] == ["a", "b", "c"]
    named = {n for _, n in op_names(trace)} | {p.name for p in trace.args}
    assert not named & THUNDER_LOCALS, trace
    # ``a``/``b`` of thunder's autocast rules must not name the rules' intermediates either
    assert [n for _, n in op_names(trace)].count("a") == 0
    check_traces(jfn)


def rebinds_a_generated_input_name(xs):
    t_0_1 = xs[0] * 2  # the input xs[1] holds t_0_1, a name derived from where it comes from
    return t_0_1 + xs[1]


def test_a_name_thunder_derived_for_an_input_is_generated():
    jfn = thunder.jit(rebinds_a_generated_input_name)
    xs = (torch.randn(3), torch.randn(3))
    torch.testing.assert_close(jfn(xs), rebinds_a_generated_input_name(xs))
    trace = thunder.last_traces(jfn)[0]
    (mul,) = (b for b in trace.bound_symbols if b.sym.name == "mul")
    assert mul.output.name == "t_0_1"
    assert len({p.name for p in trace.args}) == 2 and "t_0_1" not in {p.name for p in trace.args}
    check_traces(jfn)


def _helper_with_generated_looking_names(x1):
    layer2 = x1 * 3
    return layer2


def user_names_are_never_taken_back(x):
    x1 = torch.tanh(x)
    fc1 = x1 + 1
    out = _helper_with_generated_looking_names(fc1)  # the helper binds fc1's value to its own x1
    return x1, out


def test_a_user_name_shaped_like_a_generated_one_is_not_generated():
    jfn = thunder.jit(user_names_are_never_taken_back)
    jfn(torch.randn(3))
    names = dict((symbol, name) for symbol, name in op_names(thunder.last_traces(jfn)[0]))
    assert names["tanh"] == "x1" and names["add"] == "fc1"
    assert "layer2" in {n for _, n in op_names(thunder.last_traces(jfn)[0])}
    check_traces(jfn)


def test_a_name_reaches_only_the_proxy_it_was_bound_to():
    # Traces count names separately, so two traces can each hold a t2: here a float32 value the program binds
    # to u and a bfloat16 value it never binds. The name reaches the float32 t2 in its trace and never the
    # bfloat16 t2, which the name-keyed map of stock thunder renamed too (upstream #283).
    from thunder.core import jit_ext
    from thunder.core.proxies import TensorProxy
    from thunder.core.trace import TraceCtx, tracectx

    traces = TraceCtx(), TraceCtx()
    proxies = []
    for trace, dtype in zip(traces, (thunder.float32, thunder.bfloat16)):
        with tracectx(trace):
            proxies.append(TensorProxy("t2", shape=(2, 2), device=thunder.devices.cpu, dtype=dtype, requires_grad=False))
        trace.args = (proxies[-1],)
    bound, other = proxies
    bindings = {(id(bound), "u", False): bound}  # (proxy id, name, bound by thunder's own code)

    renames = jit_ext._allocate_proxy_names(traces, bindings)  # by the id of the proxy renamed, for every trace
    renamed = renames[id(bound)]
    assert (renamed.name, renamed.dtype, renamed.shape) == ("u", thunder.float32, bound.shape)
    assert id(other) not in renames
    renamed_trace = jit_ext._apply_trace_proxy_rename(traces[1], renames)
    assert [(p.name, p.dtype) for p in renamed_trace.args] == [("t2", thunder.bfloat16)]
