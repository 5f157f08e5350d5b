"""I10's ground truth comes from running the program eagerly, outside thunder (thunder_overlay.eager_truth): what
its frames held, held against the names of a real jit's trace. The check is fed another program's eager run to
show it sees false names, and its own to show it passes true ones."""

import functools

import torch

import thunder
from thunder_overlay import eager_truth


def _program(a, b):
    total = a + b
    return total * 2


def _swapped_names(b, a):
    # binds the same tensors as _program, under each other's names
    total = a + b
    return total * 2


def _other_shapes(a, b):
    total = a.sum() + b.sum()  # `total` is a 0-d tensor here, a (2, 3) tensor in _program
    return total * 2


def _no_tensor_under_a(*tensors):
    a = None  # `a` holds no tensor in this program
    total = tensors[0] + tensors[1]
    return total * 2 if a is None else total


def _inputs():
    return torch.randn(2, 3), torch.randn(2, 3)


def _jit(fn, args):
    jfn = thunder.jit(fn)
    jfn(*args)
    return jfn


def test_the_eager_run_records_what_the_programs_frames_held():
    x, y = _inputs()
    eager = eager_truth.record(_program, (x, y), {})
    assert eager.holds("a", x) and eager.holds("b", y) and not eager.holds("a", y)
    assert eager.shapes("total") == {(2, 3)}
    # only the program's frames: torch's and thunder's own locals are not the program's (torch and thunder lie in
    # site-packages, whose other packages are programs)
    assert set(eager.held) == {"a", "b", "total"}
    module = torch.nn.Linear(3, 3)
    eager = eager_truth.record(lambda x: module(x).relu(), (x,), {})
    assert "input" not in eager.held and "weight" not in eager.held, "F.linear's locals are torch's"
    assert eager.holds("x", x) and eager.held["module"] == {}, "the lambda's names: x, and its free variable"


def test_a_jits_true_names_pass():
    args = _inputs()
    jfn = _jit(_program, args)
    assert [p.name for p in thunder.last_traces(jfn)[0].args] == ["a", "b"]
    assert eager_truth.false_names(jfn, eager_truth.record(_program, args, {}), args, {}) == []


def test_an_input_named_after_a_variable_that_held_another_tensor_is_false():
    args = _inputs()
    jfn = _jit(_program, args)  # its trace names x `a` and y `b`; in _swapped_names, `a` held y
    found = eager_truth.false_names(jfn, eager_truth.record(_swapped_names, args, {}), args, {})
    assert len(found) == 2 and all(v.startswith("I10: input ") for v in found), found
    assert "'a'" in found[0] and "'b'" in found[1]


def test_a_tensor_named_after_a_variable_that_held_no_tensor_is_false():
    args = _inputs()
    jfn = _jit(_program, args)
    found = eager_truth.false_names(jfn, eager_truth.record(_no_tensor_under_a, args, {}), args, {})
    assert found == ["I10: input 0 is named 'a', but no frame of the program held that tensor under 'a' (eager run)"]


def test_a_computed_value_named_after_a_variable_of_other_shapes_is_false():
    args = _inputs()
    jfn = _jit(_program, args)
    found = eager_truth.false_names(jfn, eager_truth.record(_other_shapes, args, {}), args, {})
    assert found == ["I10: 'total' names a value of shape (2, 3), but the program held only shapes [()] under "
                     "'total' (eager run)"]


def test_the_eager_run_sees_through_thunders_own_wrappers_not_the_programs():
    from thunder.transforms.autocast import autocast

    def reversed_arguments(fn):
        @functools.wraps(fn)
        def wrapper(*args):
            return fn(*args[::-1])

        return wrapper

    x, y = _inputs()
    # autocast traces the function on proxies when called eagerly; the eager run calls what it wraps instead
    eager = eager_truth.record(autocast(_program, dtype=thunder.bfloat16), (x, y), {})
    assert eager.holds("a", x) and eager.holds("b", y)
    # a user's decorator is the program: its frame runs, and the wrapped function binds the reversed inputs
    eager = eager_truth.record(autocast(reversed_arguments(_program), dtype=thunder.bfloat16), (x, y), {})
    assert eager.holds("a", y) and eager.holds("b", x)


def test_check_traces_holds_a_jit_against_the_eager_run_of_its_program():
    from thunder_overlay import TraceCheckError, check_traces

    class Affine(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = torch.nn.Linear(3, 3)

        def forward(self, x):
            hidden = self.lin(x)
            return hidden.relu()

    module, x = Affine(), torch.randn(2, 3)
    jmodule = thunder.jit(module)
    jmodule(x)
    assert "I10" in check_traces(jmodule, (x,)).across
    args = _inputs()
    jfn = _jit(_program, args)
    thunder.compile_data(jfn).fn = _swapped_names  # the program check_traces runs eagerly: one that binds otherwise
    try:
        check_traces(jfn, args)
    except TraceCheckError as e:
        assert "I10" in str(e) and "input 0 is named 'a'" in str(e)
    else:
        raise AssertionError("check_traces passed names the eager run contradicts")
