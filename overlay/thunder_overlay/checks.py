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

    def add(self, other: CheckReport) -> None:
        self.traces += other.traces
        self.rerun += other.rerun
        self.not_recomputed.update(other.not_recomputed)
        self.notes += other.notes

    def __str__(self) -> str:
        kinds = ", ".join(sorted(self.not_recomputed))
        return (
            f"{self.traces} trace(s): {self.rerun} symbols re-run, their outputs' dtype, shape and device as "
            f"recorded; {sum(self.not_recomputed.values())} compute no metadata ({kinds or 'none'})"
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


def check_traces(jfn) -> CheckReport:
    """Check every trace thunder kept for the last call of ``jfn`` (prologue, computation, backward).

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
    return report


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
