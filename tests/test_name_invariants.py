"""I9 (a value the traces of one jit pass one to another has one name in all of them) and I10 (a proxy named
after a variable of the program holds the value the program bound to it), checked by ``checks.name_violations``
and ``check_traces``.

Two kinds of tests. The checker must detect what it checks whatever series is installed: real thunder jits a
small program while ``jit_ext._apply_trace_proxy_rename`` hands back a deliberately mis-renamed trace, made with
thunder's own trace API (the same values, names swapped or changed), and the checker must report it. And
thunder itself must hold both: stock (THUNDER_OVERLAY=0, in a subprocess) and the overlay, on the programs the
series v4 got wrong; the whole corpus is in ``tests/test_names.py``.
"""

from __future__ import annotations

import json
from contextlib import contextmanager

import pytest
import torch
import thunder
import thunder.core.jit_ext as jit_ext
from thunder.core.codeutils import SigInfo
from thunder.core.proxies import Proxy, variableify
from thunder.core.pytree import tree_flatten, tree_map
from thunder.core.trace import TraceCtx, from_trace, tracectx

from thunder_overlay import TraceCheckError, check_traces, checks, name_corpus

from conftest import run_python


def subtract(x, y):
    scaled = x * 2
    return scaled - y


def with_grad(x, w):
    h = torch.tanh(x @ w)
    return (h * h).sum()


def _inputs(n=2, requires_grad=False):
    return [torch.randn(3, 3, generator=torch.Generator().manual_seed(k), requires_grad=requires_grad) for k in range(n)]


def _kind(args, kwargs) -> str:
    """Which trace a call of _apply_trace_proxy_rename renames: stock and the series name the computation's and the
    epilogue's calls, not the prologue's."""
    name = args[1] if len(args) > 1 else kwargs.get("name")
    return name or "prologue"


def _renamed(trace, names: dict[str, str]):
    """A copy of ``trace`` in which the proxies named as the keys of ``names`` are named as its values, everywhere
    (signature, symbols, subsymbols), made with thunder's trace API."""
    if set(names) & set(names.values()):  # thunder's swap follows renames by name: a swap goes through others
        through = {old: f"swapping_{k}" for k, old in enumerate(names)}
        return _renamed(_renamed(trace, through), {through[old]: new for old, new in names.items()})
    proxies = {}
    in_symbols = (q for b in trace.bound_symbols for q in (*b.flat_proxy_outs, *b.flat_proxy_args))
    for p in [*tree_flatten(trace.args)[0], *in_symbols]:
        if isinstance(p, Proxy) and p.name in names:
            proxies.setdefault(p.name, p)
    with tracectx(TraceCtx()):  # a scratch trace: the new names are registered nowhere else
        swap = {variableify(p): p.replace_name(names[name]) for name, p in proxies.items()}
    bad = from_trace(trace)
    bad.args = tree_map(lambda a: swap.get(variableify(a), a) if isinstance(a, Proxy) else a, trace.args)
    bad.kwargs = trace.kwargs
    bad.bound_symbols = [b.from_bsym_swap_proxies(swap) for b in trace.bound_symbols]
    bad.names.update(names.values())  # thunder's later passes look names up there
    if trace._siginfo is not None and trace._siginfo.name in ("computation", "epilogue"):
        si = SigInfo(trace._siginfo.name)
        si.args = [(p.name, None) for p in bad.args]
        bad._siginfo = si
    return bad


@contextmanager
def misnamed(kinds: set[str], names: dict[str, str]):
    """thunder.jit names the traces of these kinds (prologue, computation, epilogue) with ``names`` applied on
    top of its own renames."""
    original = jit_ext._apply_trace_proxy_rename

    def sabotaged(trace, *args, **kwargs):
        renamed = original(trace, *args, **kwargs)
        return _renamed(renamed, names) if _kind(args, kwargs) in kinds else renamed

    jit_ext._apply_trace_proxy_rename = sabotaged
    try:
        yield
    finally:
        jit_ext._apply_trace_proxy_rename = original


# --- the checker detects what it checks, whatever series is installed -----------------------------------------


def test_a_clean_jit_breaks_neither():
    x, y = _inputs()
    with checks.recording_bindings() as recorder:
        jfn = thunder.jit(subtract)
        torch.testing.assert_close(jfn(x, y), subtract(x, y))
        report = check_traces(jfn)
    assert report.across == ["I9", "I10"]
    assert checks.name_violations(jfn, recorder) == ([], [])
    # the recorder saw the program bind its parameters and `scaled`, each from the program's own frame
    assert {"x", "y", "scaled"} <= {name for _, name, by_program in recorder.bindings if by_program}


def test_i9_a_computation_input_renamed_apart_from_the_prologue_output():
    x, y = _inputs()
    with misnamed({"computation"}, {"x": "renamed_x"}):
        jfn = thunder.jit(subtract)
        torch.testing.assert_close(jfn(x, y), subtract(x, y))  # the same program: only the name differs
    shared, bound = checks.name_violations(jfn)
    assert bound is None, "I10 needs the recorder"
    assert shared == ["I9: prologue output -> computation argument (first traces), position 0: 'x' != 'renamed_x'"]
    with pytest.raises(TraceCheckError, match=r"break I9 .*\n  I9: prologue output -> computation argument .* 0: 'x'"):
        check_traces(jfn)


def test_i9_a_saved_value_renamed_in_the_backward():
    x, w = _inputs(requires_grad=True)
    jfn = thunder.jit(with_grad)
    jfn(x, w).backward()
    traces = checks.last_call_traces(jfn)
    assert checks.shared_name_violations(traces) == []
    saved = checks._saved_for_backward(traces["computation"][-1])
    assert saved and checks._backward_inputs(traces["backward"][-1]) == saved  # the very proxies, positionally
    name = saved[-1].name
    bad = dict(traces, backward=[*traces["backward"][:-1], _renamed(traces["backward"][-1], {name: "renamed"})])
    last = len(saved) - 1
    assert checks.shared_name_violations(bad) == [
        f"I9: forward saved value -> backward saved input (last traces), position {last}: {name!r} != 'renamed'"
    ]


def test_i9_an_epilogue_input_renamed():
    # the epilogue takes the computation's outputs (and the prologue's values for it), positionally
    x, y = _inputs()
    jfn = thunder.jit(subtract)
    jfn(x, y)
    traces = checks.last_call_traces(jfn)
    (epilogue,) = traces["epilogue"]
    name = epilogue.args[0].name
    bad = dict(traces, epilogue=[_renamed(epilogue, {name: "renamed"})])
    assert checks.shared_name_violations(bad) == [
        f"I9: prologue/computation output -> epilogue argument (epilogue trace 0), position 0: {name!r} != 'renamed'"
    ]


def test_i10_inputs_whose_names_are_swapped_in_every_trace():
    # The prologue and the computation agree (I9 holds), but each input carries the other's name
    x, y = _inputs()
    with misnamed({"prologue", "computation"}, {"x": "y", "y": "x"}), checks.recording_bindings() as recorder:
        jfn = thunder.jit(subtract)
        torch.testing.assert_close(jfn(x, y), subtract(x, y))
        shared, bound = checks.name_violations(jfn, recorder)
        with pytest.raises(TraceCheckError, match=r"break I10 .*\n  I10: 'y' in the prologue and computation traces "
                           r"names a value the program bound to 'x' only"):
            check_traces(jfn)
    assert shared == []
    assert sorted(bound) == [
        "I10: 'x' in the prologue and computation traces names a value the program bound to 'y' only",
        "I10: 'y' in the prologue and computation traces names a value the program bound to 'x' only",
    ]


def test_i10_a_program_name_given_to_a_value_the_program_never_bound_to_it():
    x, y = _inputs()
    with misnamed({"computation"}, {"y": "scaled", "scaled": "t_other"}), checks.recording_bindings() as recorder:
        jfn = thunder.jit(subtract)
        jfn(x, y)
    shared, bound = checks.name_violations(jfn, recorder)
    assert "I10: 'scaled' in the computation trace names a value the program bound to 'y' only" in bound


def test_i10_is_checked_only_with_the_recorder_that_saw_the_jit():
    x, y = _inputs()
    with checks.recording_bindings() as first:
        jfn = thunder.jit(subtract)
        jfn(x, y)
    with checks.recording_bindings() as second:
        assert check_traces(jfn).across == ["I9"]  # traced before this block
        other = thunder.jit(lambda a: a + 1)
        other(x)
    assert first.jit_of(checks.last_call_traces(jfn)) is not None
    assert second.jit_of(checks.last_call_traces(jfn)) is None
    assert second.jit_of(checks.last_call_traces(other)) is not None
    assert jit_ext._apply_trace_proxy_rename is first._originals["_apply_trace_proxy_rename"], "uninstalled"


def test_thunder_s_own_locals_are_not_the_program_s_bindings():
    # thunder.torch.size's parameter `a` holds the tanh; the program's name for it is `t`
    (x,) = name_corpus.through_a_list_inputs()
    with checks.recording_bindings() as recorder:
        thunder.jit(name_corpus.through_a_list)(x)
    by_program = {(name, program) for _, name, program in recorder.bindings}
    assert ("t", True) in by_program and ("a", False) in by_program and ("a", True) not in by_program


# --- thunder holds both: stock, and the overlay, on the programs the series v4 got wrong -----------------------

# Jits the corpus programs named in PROGRAMS inside the recorder and prints, per program, what check_traces and
# name_violations found, and how the recorder told the program's bindings from thunder's (size's `a`)
CHECK_PROGRAMS = """
import json, warnings
warnings.filterwarnings("ignore")
import thunder
from thunder_overlay import check_traces, checks, names

for program in PROGRAMS:
    with checks.recording_bindings() as recorder:
        (jfn,) = names.jit_target(f"{names.CORPUS}:{program}")
        shared, bound = checks.name_violations(jfn, recorder)
        try:
            check_traces(jfn)
            raised = None
        except checks.TraceCheckError as e:
            raised = str(e).splitlines()[0]
    thunders = sorted({name for _, name, program_ in recorder.bindings if not program_})
    print("@@ " + json.dumps({"program": program, "i9": shared, "i10": bound, "raised": raised, "thunders": thunders}))
"""

V4_PROGRAMS = ["rebinds_weight", "rebinds_weight_with_grad", "wraps_swapped", "through_a_list"]


def checked_programs(overlay: str) -> dict[str, dict]:
    proc = run_python(f"PROGRAMS = {V4_PROGRAMS!r}", CHECK_PROGRAMS, overlay=overlay, env={"PYTHONWARNINGS": "ignore"})
    assert proc.returncode == 0, proc.stderr[-3000:]
    found = [json.loads(line[3:]) for line in proc.stdout.splitlines() if line.startswith("@@ ")]
    return {record["program"]: record for record in found}


@pytest.fixture(scope="module", params=["0", "1"], ids=["stock", "overlay"])
def side(request):
    return request.param, checked_programs(request.param)


def test_i9_a_name_rebound_to_a_module_parameter(side):
    # `w` names x * 2, then the layer's weight: the prologue must pass the weight under the computation's name
    overlay, found = side
    for program in ("rebinds_weight", "rebinds_weight_with_grad"):
        assert found[program]["i9"] == [] and found[program]["raised"] is None, found[program]


def test_i10_a_wrapper_takes_the_wrapped_function_s_parameters_in_another_order(side):
    # functools.wraps gives swapped(b, a) f's signature (a, b): the first input is still the program's `b`
    overlay, found = side
    assert found["wraps_swapped"]["i10"] == [] and found["wraps_swapped"]["raised"] is None, found["wraps_swapped"]


def test_the_recorder_tells_thunder_s_bindings_from_the_program_s(side):
    # stock passes no code to _maybe_update_proxy_name: the recorder finds the frame being set up itself
    overlay, found = side
    assert "a" in found["through_a_list"]["thunders"]
    assert found["through_a_list"]["i10"] == []
