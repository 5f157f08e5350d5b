"""A trace checker stricter than upstream's thunder.dev_utils.check_trace.

Upstream checks names and shapes. This also checks what a wrong rename breaks: every proxy's dtype,
shape and device are what its producing symbol computes (the symbol's meta is re-run on the recorded
arguments, fusion regions symbol by symbol), and no two different values share a name in a trace,
nested symbols included. Proxy objects that share a name must describe one value (same type, dtype,
shape, device): thunder's own transforms make such copies, for example in the augmented forward trace
of 0.2.1.

Symbols are re-run in the context they were traced in: a compile data of their own (a copy of the jitted
function's, when there is one) whose autocast stack the trace's own ``autocast_enter`` / ``autocast_exit``
push and pop, and the cache information that factory symbols (``torch.tensor``, ``full``) read for the
default dtype and device. A symbol that computes no metadata (unpacking, return, deletion, comments) is
not re-run; the report counts both kinds.
"""

from __future__ import annotations

import copy
import os
import sys
from collections import Counter
from contextlib import contextmanager

import thunder
from thunder.core import dtypes
from thunder.core.proxies import Proxy, TensorProxy, variableify
from thunder.core.pytree import tree_flatten
from thunder.core.trace import from_trace, tracectx

# Symbols whose re-execution is not a metadata computation: unpacking of inputs, returns, deletions.
_NOT_RECOMPUTED_PREFIXES = ("unpack", "pack_", "python_return", "return", "python_del", "del", "comment")


class TraceCheckError(AssertionError):
    pass


class CheckReport:
    """What a check covered: traces, symbols re-run with their metadata compared, symbols with no metadata
    to compute (by name)."""

    def __init__(self):
        self.traces = 0
        self.rerun = 0
        self.not_recomputed: Counter[str] = Counter()
        # What the check had to take into account, in words: an earlier trace that thunder itself left
        # inconsistent, and how it was checked instead
        self.notes: list[str] = []
        # The invariants checked across the traces of a call: I9, and I10 where the jit traced while
        # recording_bindings() was open
        self.across: list[str] = []

    def add(self, other: CheckReport) -> None:
        self.traces += other.traces
        self.rerun += other.rerun
        self.not_recomputed.update(other.not_recomputed)
        self.notes += other.notes
        self.across += [i for i in other.across if i not in self.across]

    def __str__(self) -> str:
        kinds = ", ".join(sorted(self.not_recomputed))
        return (
            f"{self.traces} trace(s): {self.rerun} symbols re-run, their outputs' dtype, shape and device as "
            f"recorded; {sum(self.not_recomputed.values())} compute no metadata ({kinds or 'none'})"
            + (f"; names across the traces: {', '.join(self.across)}" if self.across else "")
        )

    def __repr__(self) -> str:
        return f"<CheckReport {self}>"


def _describe(p: Proxy) -> str:
    if isinstance(p, TensorProxy):
        return f"{p.device} {p.dtype} {tuple(p.shape)}"
    return type(p).__name__


def _walk_bsyms(bsyms):
    for bsym in bsyms:
        yield bsym
        yield from _walk_bsyms(bsym.subsymbols)


def check_names(trace) -> None:
    """I2: one name, one value, across the signature, the bound symbols and their subsymbols."""
    seen: dict[str, Proxy] = {}

    def see(p: Proxy, where: str) -> None:
        other = seen.setdefault(p.name, p)
        if other is not p and _describe(other) != _describe(p):
            raise TraceCheckError(
                f"name {p.name!r} is shared by two different proxies ({_describe(other)} and {_describe(p)}), "
                f"the second in {where}"
            )

    for p in tree_flatten((trace.args, trace.kwargs))[0]:
        if isinstance(p, Proxy):
            see(p, "the signature")
    for bsym in _walk_bsyms(trace.bound_symbols):
        for p in (*bsym.flat_proxy_outs, *bsym.flat_proxy_args):
            see(p, f"{bsym.sym.name}")


def _scratch_compile_data(compile_data):
    """A compile data to re-run symbols under, with an empty autocast stack of its own: a copy of
    ``compile_data`` (the jitted function's), or a new one for a trace checked on its own."""
    from thunder.common import CompileData
    from thunder.core.utils import AutocastStack

    scratch = copy.copy(compile_data) if compile_data is not None else CompileData(fn=lambda: None, using_jit=True, disable_preprocessing=True)
    scratch.autocast_stack = AutocastStack()
    return scratch


@contextmanager
def _traced_context(compile_data):
    import torch
    from thunder.core.compile_data import compile_data_and_stats

    token = thunder._cache_info_ctx.set(
        {"default_dtype": torch.get_default_dtype(), "default_device": torch.get_default_device()}
    )
    try:
        with compile_data_and_stats(_scratch_compile_data(compile_data), None):
            yield
    finally:
        thunder._cache_info_ctx.reset(token)


def _check_outputs(bsym, recomputed) -> None:
    for new, old in zip(tree_flatten(recomputed)[0], tree_flatten(bsym.output)[0]):
        if not (isinstance(new, TensorProxy) and isinstance(old, TensorProxy)):
            continue
        for field in ("dtype", "shape", "device"):
            want, got = getattr(new, field), getattr(old, field)
            if want != got:
                raise TraceCheckError(
                    f"proxy {old.name} is recorded with {field} {got}, but {bsym.sym.name} computes "
                    f"{want}: `{_first_line(bsym)}`"
                )


def _rerun(bsyms, report: CheckReport) -> None:
    for bsym in bsyms:
        if bsym.sym.is_fusion:  # a fusion region: its symbols, one by one
            _rerun(bsym.subsymbols, report)
            continue
        if bsym.sym.name.startswith(_NOT_RECOMPUTED_PREFIXES):
            report.not_recomputed[bsym.sym.name] += 1
            continue
        try:
            recomputed = bsym.sym(*bsym.args, **bsym.kwargs)
        except Exception as e:  # the recorded arguments are not what the symbol accepts: the trace is wrong
            raise TraceCheckError(f"re-running {bsym.sym.name} of `{_first_line(bsym)}` failed: {e!r}") from e
        report.rerun += 1
        _check_outputs(bsym, recomputed)


def check_metadata(trace, compile_data=None) -> CheckReport:
    """I1: re-run each top-level symbol (each symbol of a fusion region) and compare dtype, shape and device
    of its outputs with the recorded ones."""
    report = CheckReport()
    report.traces = 1
    scratch = from_trace(trace)
    with tracectx(scratch), _traced_context(compile_data):
        _rerun(trace.bound_symbols, report)
    return report


def _first_line(bsym) -> str:
    text = str(bsym).strip()
    return text.splitlines()[-1].strip() if text else bsym.sym.name


def check_trace(trace, compile_data=None) -> CheckReport:
    """Raise TraceCheckError when a trace breaks I1 (metadata) or I2 (unique names); otherwise say what was
    checked. ``compile_data``: the jitted function's (``thunder.compile_data(jfn)``), when known."""
    check_names(trace)
    return check_metadata(trace, compile_data)


def check_traces(jfn, args: tuple | None = None, kwargs: dict | None = None) -> CheckReport:
    """Check every trace thunder kept for the last call of ``jfn`` (prologue, computation, backward), and the
    names across them: I9 (``shared_name_violations``), and I10: given the call's ``args`` and ``kwargs``,
    against the program (``thunder.compile_data(jfn).fn``) run eagerly on them, outside thunder
    (``eager_truth``; ``jfn`` is called once more, from its cache, to see what it hands its computation);
    otherwise where ``jfn`` traced inside ``recording_bindings()`` and the check runs inside
    it too, against what the interpreter recorded.

    Under thunder.distributed.fsdp, thunder's FSDP pass writes the sharded shape into the parameter proxies
    of the computation trace it transforms, in place; the computation traces kept from before the pass
    share those proxy objects, so their signatures show sharded shapes while their symbols were traced
    unsharded (stock thunder does the same). Those earlier traces are checked with the parameters restored to
    the shapes they were traced with, and the report's ``notes`` say which traces and why; every trace from
    the pass on, the final ones included, is checked as thunder keeps it."""
    prologues = list(thunder.last_prologue_traces(jfn))
    computations = list(thunder.last_traces(jfn))
    traces = [*prologues, *computations, *(thunder.last_backward_traces(jfn) or [])]
    compile_data = thunder.compile_data(jfn)
    restore = _traced_before_fsdp(compile_data, prologues, computations)
    report = CheckReport()
    if restore.before:
        first = len(prologues)
        report.notes.append(
            f"trace(s) {', '.join(str(first + k) for k in sorted(restore.before))} of {len(traces)} (the computation "
            "traces from before thunder's FSDP pass) show the sharded shapes of "
            f"{len(restore.shapes)} parameter(s) their symbols were traced unsharded with: "
            "FSDPTransform.transform_traces_pre_prologue (thunder/distributed/transforms/fsdp_v2.py) sets "
            "`comp_inp_p._shape = tuple(new_shape)` on the proxies these traces share with the pass's output, in "
            "place, stock thunder as well; checked with those parameters at their traced shapes "
            f"({restore.example()}); the traces from the pass on, the final ones included, as thunder keeps them"
        )
    for i, trace in enumerate(traces):
        checked = restore.traced_shapes(trace) if i - len(prologues) in restore.before else trace
        try:
            report.add(check_trace(checked, compile_data))
        except TraceCheckError as e:
            raise TraceCheckError(f"trace {i} of {len(traces)}: {e}\n{trace}") from None
    shared, bound = name_violations(jfn)
    if args is not None:
        from thunder_overlay import eager_truth

        kwargs = kwargs or {}
        bound = eager_truth.false_names(jfn, eager_truth.record(compile_data.fn, args, kwargs), args, kwargs)
    report.across = ["I9"] + (["I10"] if bound is not None else [])
    broken = [what for what, found in ((_I9, shared), (_I10, bound)) if found]
    if broken:
        raise TraceCheckError(f"the names of the traces of the last call break {' and '.join(broken)}:\n  "
                              + "\n  ".join([*shared, *(bound or ())]))
    return report


_I9 = "I9 (a value one trace passes to another has one name in both)"
_I10 = "I10 (a proxy named after a variable of the program holds the value the program bound to it)"


# ---------------------------------------------------------------------------------------------------------
# I9: a value that several traces of one jit share has one name in all of them.
#
# thunder connects the traces of a jit by position: the prologue returns ``((computation inputs),
# (epilogue inputs))``, the computation trace takes the first as its arguments, the epilogue takes the second
# followed by the computation's outputs, and with gradients the forward (the last computation trace) returns
# ``(data, ((saved tensors), (saved others)))``, which the backward trace takes as its first argument and
# unpacks (``C0, C1, = saved_for_backward``, then ``t_lin_weight, t40, = C0``).


def last_call_traces(jfn) -> dict[str, list]:
    """The traces thunder kept for the last call of ``jfn``, by kind: prologue, computation, epilogue, backward."""
    stats = thunder.compile_stats(jfn)
    return {
        "prologue": list(thunder.last_prologue_traces(jfn)),
        "computation": list(thunder.last_traces(jfn)),
        "epilogue": [t for t in getattr(stats, "last_epilogue_traces", None) or () if t is not None],
        "backward": list(thunder.last_backward_traces(jfn) or ()),
    }


def _returned(trace):
    """What ``trace`` returns: the arguments of its last return symbol (None: it has none)."""
    from thunder.core.prims import PrimIDs

    for bsym in reversed(trace.bound_symbols):
        if bsym.sym.id == PrimIDs.RETURN:
            return bsym.args[0] if len(bsym.args) == 1 else bsym.args
    return None


def _prologue_outputs(trace) -> tuple[tuple, tuple] | None:
    """(the values a prologue passes to the computation, those it passes to the epilogue)."""
    returned = _returned(trace)
    sequences = (tuple, list)
    if isinstance(returned, sequences) and len(returned) == 2 and all(isinstance(r, sequences) for r in returned):
        return tuple(returned[0]), tuple(returned[1])
    return None


def _saved_for_backward(forward) -> tuple | None:
    """The values the forward trace saves for the backward, in the order the backward unpacks them."""
    returned = _returned(forward)
    if not (isinstance(returned, (tuple, list)) and len(returned) == 2 and isinstance(returned[1], (tuple, list))):
        return None
    saved = returned[1]
    if len(saved) != 2 or not all(isinstance(s, (tuple, list)) for s in saved):
        return None
    return (*saved[0], *saved[1])


def _backward_inputs(backward) -> tuple | None:
    """The backward trace's saved values as it unpacks them: its first parameter (``saved_for_backward``) unpacked
    into two collections, each of those into values (the tensors, then the others), positionally."""
    from thunder.core.prims import PrimIDs

    parameters = [b.output for b in backward.bound_symbols if b.sym.id == PrimIDs.UNPACK_TRIVIAL]
    if not parameters:
        return None
    unpacked = {}  # id(collection) -> its unpacked items
    for bsym in backward.bound_symbols:
        if bsym.sym.id == PrimIDs.UNPACK_SEQUENCE and bsym.args:
            unpacked.setdefault(id(bsym.args[0]), list(bsym.output) if isinstance(bsym.output, (tuple, list)) else [])
    collections = unpacked.get(id(parameters[0]))
    if collections is None or len(collections) != 2:
        return None
    # a collection the backward never unpacks is empty or unused: it names nothing
    tensors, others = (unpacked.get(id(c), []) for c in collections)
    return (*tensors, *others)


def _pairs(first, second):
    """Positional pairs of proxies of two sequences that thunder passes one to the other (None: the sequences
    have different lengths, so they are not one calling convention)."""
    if first is None or second is None or len(first) != len(second):
        return None
    return [(k, a, b) for k, (a, b) in enumerate(zip(first, second)) if isinstance(a, Proxy) and isinstance(b, Proxy)]


def shared_name_violations(traces: dict[str, list]) -> list[str]:
    """I9: where the traces of one call (``last_call_traces``) pass a value one to another, the value has one
    name in both. Pairs, positionally: the prologue's outputs and the computation's arguments (the first traces,
    as thunder.jit names them, and the last, as they run); the prologue's epilogue outputs followed by the first
    computation trace's outputs and each epilogue trace's arguments; the last computation (forward) trace's
    saved values and the last backward trace's unpacked saved values. The computation's later traces are rebuilt
    by thunder's transforms, which give their intermediate values new generated names (stock and overlay alike),
    so their outputs are not paired with the epilogue."""
    prologues, computations = traces.get("prologue") or [], traces.get("computation") or []
    epilogues, backwards = traces.get("epilogue") or [], traces.get("backward") or []
    passes = []  # (what is passed, between which traces, positional pairs or None)
    if prologues and computations:
        for stage, pro, comp in (("first", prologues[0], computations[0]), ("last", prologues[-1], computations[-1])):
            outputs = _prologue_outputs(pro)
            passes.append(("prologue output -> computation argument", f"{stage} traces",
                           _pairs(outputs and outputs[0], tuple(comp.args))))
        outputs = _prologue_outputs(prologues[0])
        returned = _returned(computations[0])
        passed = (*outputs[1], *returned) if outputs is not None and isinstance(returned, (tuple, list)) else None
        for k, epi in enumerate(epilogues):
            passes.append(("prologue/computation output -> epilogue argument", f"epilogue trace {k}",
                           _pairs(passed, tuple(epi.args))))
    if computations and backwards:
        passes.append(("forward saved value -> backward saved input", "last traces",
                       _pairs(_saved_for_backward(computations[-1]), _backward_inputs(backwards[-1]))))
    found, seen = [], set()
    for what, where, pairs in passes:
        for position, a, b in pairs or ():
            # one finding per value where the first and the last traces show it alike
            if a.name != b.name and (what, position, a.name, b.name) not in seen:
                seen.add((what, position, a.name, b.name))
                found.append(f"I9: {what} ({where}), position {position}: {a.name!r} != {b.name!r}")
    return found


def _named(violation: str) -> frozenset[str]:
    """The names a violation's message quotes."""
    return frozenset(violation.split("'")[1::2])


# ---------------------------------------------------------------------------------------------------------
# I10: a proxy named after a program variable holds the value that variable had where the program bound it.
#
# The ground truth comes from outside the naming: while a jit traces, the recorder sees every binding the
# interpreter reports (``jit_ext._maybe_update_proxy_name``, called whenever a frame stores, loads or receives
# a value under a name; stock and the series both call it) and every rename of a trace
# (``jit_ext._apply_trace_proxy_rename``: the trace before and after), and checks the renamed traces against
# what the program bound. It records; thunder runs unchanged.


class _Rename:
    """One call of ``_apply_trace_proxy_rename``: the trace before and after, and each proxy of the renamed trace
    paired with the proxy it renames (the object the program bound), structurally: arguments, then each symbol's
    outputs and arguments, subsymbols after their symbol."""

    def __init__(self, before, after, bindings_so_far: int):
        self.before, self.after = before, after  # kept, so that the ids of their proxies stay valid
        self.bindings_so_far = bindings_so_far
        self.original: dict[int, tuple[Proxy, Proxy]] = {}  # id(renamed proxy) -> (it, the proxy it renames)

        def pair(first, second):
            for a, b in zip(first, second):
                if isinstance(a, Proxy) and isinstance(b, Proxy):
                    self.original.setdefault(id(b), (b, a))

        pair(tree_flatten((before.args, before.kwargs))[0], tree_flatten((after.args, after.kwargs))[0])

        def walk(first, second):
            for a, b in zip(first, second):
                pair(a.flat_proxy_outs, b.flat_proxy_outs)
                pair(a.flat_proxy_args, b.flat_proxy_args)
                walk(a.subsymbols, b.subsymbols)

        walk(before.bound_symbols, after.bound_symbols)


class BindingRecorder:
    """What the program bound while thunder.jit traced (``bindings``: proxy, name, whether a frame of the program
    bound it) and the renames of the traces (``renames``), in order. Made by ``recording_bindings()``."""

    def __init__(self):
        import thunder.core.interpreter as interpreter
        import thunder.core.jit_ext as jit_ext

        self._jit_ext, self._interpreter = jit_ext, interpreter
        self.bindings: list[tuple[Proxy, str, bool]] = []
        self.renames: list[_Rename] = []
        self.active = False
        thunder_dir = os.path.dirname(thunder.__file__) + os.sep
        self._thunder_dir = thunder_dir
        self._program_dirs = (thunder_dir + "tests" + os.sep, thunder_dir + "benchmarks" + os.sep)
        self._originals = {"_maybe_update_proxy_name": jit_ext._maybe_update_proxy_name,
                           "_apply_trace_proxy_rename": jit_ext._apply_trace_proxy_rename}
        self._wrappers = {"_maybe_update_proxy_name": self._binding, "_apply_trace_proxy_rename": self._rename}

    def install(self) -> None:
        for name, wrapper in self._wrappers.items():
            setattr(self._jit_ext, name, wrapper)
        self.active = True

    def uninstall(self) -> None:
        self.active = False
        for name, wrapper in self._wrappers.items():
            if getattr(self._jit_ext, name) is wrapper:  # a recorder installed after this one keeps its own
                setattr(self._jit_ext, name, self._originals[name])

    def is_program(self, filename: str) -> bool:
        """Whether code of this file is the program's: anything but thunder's own package (its tests and
        benchmarks are programs)."""
        return not filename.startswith(self._thunder_dir) or filename.startswith(self._program_dirs)

    def _binding_code(self, args, kwargs):
        """The code of the frame that binds: the series passes it; stock's local callback (the parameters of a
        frame being set up, before it is on the interpreter's stack) has it in the interpreter's frame set-up;
        every other binding is by the frame on top of the interpreter's stack."""
        import types

        for value in (*args, *kwargs.values()):
            if isinstance(value, types.CodeType):
                return value
        frame, setup = sys._getframe(2), None
        for _ in range(4):
            if frame is None:
                break
            if frame.f_code.co_name == "local_callback":
                setup = frame.f_back
                break
            frame = frame.f_back
        if setup is not None and setup.f_code.co_name == "_setup_frame_and_run_python_function":
            return setup.f_locals.get("code")
        top = self._interpreter.get_interpreterruntimectx().peek_frame_stack()
        return top.code if top is not None else None

    def _binding(self, orig_value, name, *args, **kwargs):
        if self.active:
            value = self._interpreter.unwrap(orig_value)
            if isinstance(value, Proxy):
                code = self._binding_code(args, kwargs)
                self.bindings.append((value, name, code is not None and self.is_program(code.co_filename)))
        return self._originals["_maybe_update_proxy_name"](orig_value, name, *args, **kwargs)

    def _rename(self, trace, *args, **kwargs):
        renamed = self._originals["_apply_trace_proxy_rename"](trace, *args, **kwargs)
        if self.active:
            self.renames.append(_Rename(trace, renamed, len(self.bindings)))
        return renamed

    def jit_of(self, traces: dict[str, list]) -> RecordedJit | None:
        """What this recorder saw of the jit that made ``traces`` (``last_call_traces``: its first prologue,
        computation and epilogue traces are what the renames returned); None when it did not see that jit."""
        kinds = {id(t[0]): kind for kind, t in traces.items() if t and kind != "backward"}
        found = [k for k, r in enumerate(self.renames) if id(r.after) in kinds]
        if not found:
            return None
        # One jit renames its traces one after the other, binding nothing between; its bindings are those made
        # after the renames of the jit before it
        first = found[0]
        while first > 0 and self.renames[first - 1].bindings_so_far == self.renames[first].bindings_so_far:
            first -= 1
        start = self.renames[first - 1].bindings_so_far if first else 0
        renames = {kinds[id(self.renames[k].after)]: self.renames[k] for k in found}
        return RecordedJit(renames, self.bindings[start:self.renames[first].bindings_so_far])


class RecordedJit:
    """One jit as the recorder saw it: the renames of its traces by kind (prologue, computation, epilogue) and
    the bindings made while it traced (proxy, name, whether a frame of the program bound it)."""

    def __init__(self, renames: dict[str, _Rename], bindings: list[tuple[Proxy, str, bool]]):
        self.renames, self.bindings = renames, bindings


_RECORDERS: list[BindingRecorder] = []


@contextmanager
def recording_bindings():
    """Record what programs bind and how thunder.jit renames their traces while the block runs, so that
    ``check_traces`` also checks I10 for the jits traced inside it. Yields the BindingRecorder."""
    recorder = BindingRecorder()
    recorder.install()
    _RECORDERS.append(recorder)
    try:
        yield recorder
    finally:
        recorder.uninstall()
        _RECORDERS.remove(recorder)


def binding_violations(recorded: RecordedJit) -> list[str]:
    """I10: a proxy of a renamed trace whose name the program bound (to any proxy) is a proxy the program bound
    to that very name (its object before the rename). Of the prologue, the values it passes on (the program's
    inputs) are checked; its own plumbing (its ``args`` and ``kwargs``, ``cache_info``, the modules and the
    values its checks read) holds no value of the program, whatever thunder names it."""
    bound = {(id(p), name) for p, name, by_program in recorded.bindings if by_program}
    program_names = {name for _, name in bound}
    names_of: dict[int, list[str]] = {}
    for p, name, by_program in recorded.bindings:
        if by_program and name not in names_of.setdefault(id(p), []):
            names_of[id(p)].append(name)
    wrong: dict[tuple[int, str], list[str]] = {}  # (id(proxy before the rename), name) -> the trace kinds
    for kind, rename in recorded.renames.items():
        passed = None
        if kind == "prologue":
            outputs = _prologue_outputs(rename.after)
            passed = {id(p) for p in tree_flatten(outputs)[0]} if outputs is not None else None
        for proxy, original in rename.original.values():
            if passed is not None and id(proxy) not in passed:
                continue
            if proxy.name in program_names and (id(original), proxy.name) not in bound:
                kinds = wrong.setdefault((id(original), proxy.name), [])
                if kind not in kinds:
                    kinds.append(kind)
    found = []
    for (key, name), kinds in wrong.items():
        was = names_of.get(key)
        where = f"the {' and '.join(kinds)} trace{'s' if len(kinds) > 1 else ''}"
        found.append(f"I10: {name!r} in {where} names a value the program "
                     + (f"bound to {', '.join(map(repr, was))} only" if was else "never bound to a name"))
    return found


def renamed_apart(recorded: RecordedJit) -> list[str]:
    """I9 by identity: a proxy that several traces of the jit hold before their renames takes one name in all."""
    names: dict[int, dict[str, str]] = {}  # id(proxy before the renames) -> trace kind -> its name there
    for kind, rename in recorded.renames.items():
        for proxy, original in rename.original.values():
            names.setdefault(id(original), {}).setdefault(kind, proxy.name)
    return [f"I9: one proxy is named {', '.join(f'{n!r} in the {k}' for k, n in by_kind.items())} trace"
            for by_kind in names.values() if len(set(by_kind.values())) > 1]


def _recorded_jit(traces: dict[str, list], recorder: BindingRecorder | None = None) -> RecordedJit | None:
    """What ``recorder``, or else the innermost open ``recording_bindings()`` that saw it, recorded of this jit."""
    for candidate in [recorder] if recorder is not None else reversed(_RECORDERS):
        found = candidate.jit_of(traces)
        if found is not None:
            return found
    return None


def name_violations(jfn, recorder: BindingRecorder | None = None) -> tuple[list[str], list[str] | None]:
    """(I9 violations, I10 violations) of the last call of ``jfn``. I10 needs what the program bound: its
    violations are None unless ``recorder`` (or a ``recording_bindings()`` block still open) saw the jit, which
    also adds I9 by identity: a proxy the renames give two names."""
    traces = last_call_traces(jfn)
    shared = shared_name_violations(traces)
    recorded = _recorded_jit(traces, recorder)
    if recorded is None:
        return shared, None
    # a proxy renamed apart that the positional pairs already show is one finding, not two
    apart = [v for v in renamed_apart(recorded) if not any(_named(v) == _named(s) for s in shared)]
    return shared + apart, binding_violations(recorded)


class _FSDPRestore:
    """The computation traces thunder kept from before its FSDP pass (by index) and the shapes their sharded
    parameter proxies were traced with (by proxy name)."""

    def __init__(self, before=(), shapes=None):
        self.before = set(before)
        self.shapes: dict[str, tuple[int, ...]] = shapes or {}

    def example(self) -> str:
        name, shape = next(iter(self.shapes.items()))
        return f"e.g. {name} {shape}"

    def traced_shapes(self, trace):
        from thunder.core.trace import TraceCtx

        swap = {}
        with tracectx(TraceCtx()):  # a scratch trace: the copies' names are registered nowhere else
            for p in tree_flatten((trace.args, trace.kwargs))[0]:
                if isinstance(p, TensorProxy) and p.name in self.shapes:
                    swap[variableify(p)] = p.replace(shape=self.shapes[p.name])
        restored = from_trace(trace)
        restored.args = tuple(swap.get(variableify(a), a) if isinstance(a, Proxy) else a for a in trace.args)
        restored.bound_symbols = [b.from_bsym_swap_proxies(swap) for b in trace.bound_symbols]
        return restored


def _traced_before_fsdp(compile_data, prologues, computations) -> _FSDPRestore:
    """Which computation traces thunder's FSDP pass left with sharded shapes on parameters traced unsharded:
    those before the first trace in which the pass's ``synchronize`` consumes a sharded parameter."""
    try:
        from thunder.core import prims
        from thunder.distributed.prims import PrimIDs as DistPrimIDs
        from thunder.distributed.transforms.fsdp_v2 import FSDPTransform
    except ImportError:  # a thunder without FSDP
        return _FSDPRestore()
    fsdp = [t for t in getattr(compile_data, "transforms", None) or () if isinstance(t, FSDPTransform)]
    if not fsdp or not prologues or not computations:
        return _FSDPRestore()
    sharded = fsdp[0].sharded_params  # parameter name -> (traced shape, sharded shape, device)
    prologue, first = prologues[0], computations[0]
    # the same pairing of prologue outputs and computation inputs as the pass itself makes
    producers = {id(p): b for b in prologue.bound_symbols for p in b.flat_proxy_outs}
    shapes = {}
    for pro_out, comp_in in zip(prologue.output[0], first.args):
        bsym = producers.get(id(pro_out))
        if bsym is not None and bsym.sym is prims.unpack_parameter and bsym.args[1] in sharded:
            old_shape, new_shape, _ = sharded[bsym.args[1]]
            if tuple(comp_in.shape) == tuple(new_shape) != tuple(old_shape):
                shapes[comp_in.name] = tuple(old_shape)
    if not shapes:
        return _FSDPRestore()
    before = []
    for k, trace in enumerate(computations):
        if any(b.sym.id == DistPrimIDs.SYNCHRONIZE and b.flat_proxy_args and b.flat_proxy_args[0].name in shapes
               for b in trace.bound_symbols):
            break
        before.append(k)
    else:  # no trace has the pass's synchronize: nothing to tell apart, check them as they are
        return _FSDPRestore()
    return _FSDPRestore(before, shapes)


def with_wrong_dtype(trace):
    """A copy of ``trace`` in which the output of its first re-runnable symbol that computes a floating-point
    tensor is recorded in another floating-point dtype, everywhere it is used: (the copy, that proxy's
    name). The checker must refuse the copy; the checks use it to show that they can fail."""
    fusions = [b for b in trace.bound_symbols if b.sym.is_fusion]
    candidates = [
        b
        for b in [*trace.bound_symbols, *(s for f in fusions for s in f.subsymbols)]
        if not b.sym.is_fusion
        and not b.sym.name.startswith(_NOT_RECOMPUTED_PREFIXES)
        and isinstance(b.output, TensorProxy)
        and dtypes.is_float_dtype(b.output.dtype)
    ]
    if not candidates:
        raise ValueError("the trace has no symbol that computes a floating-point tensor")
    out = candidates[0].output
    wrong_dtype = thunder.float64 if out.dtype != thunder.float64 else thunder.float32
    with tracectx(trace):
        wrong = TensorProxy(like=out, dtype=wrong_dtype, name=f"{out.name}_wrong")
    swap = {variableify(out): wrong}
    bad = from_trace(trace)
    bad.bound_symbols = [b.from_bsym_swap_proxies(swap) for b in trace.bound_symbols]
    return bad, wrong.name
