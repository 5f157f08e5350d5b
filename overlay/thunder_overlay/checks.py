"""A trace checker stricter than upstream's thunder.dev_utils.check_trace.

Upstream checks names and shapes. This also checks what a wrong rename breaks: every proxy's dtype,
shape and device are what its producing symbol computes (the symbol's meta is re-run on the recorded
arguments), and no two different values share a name in a trace, nested symbols included. Proxy
objects that share a name must describe one value (same type, dtype, shape, device): thunder's own
transforms make such copies, for example in the augmented forward trace of 0.2.1.
"""

from __future__ import annotations

import thunder
from thunder.core.proxies import Proxy, TensorProxy
from thunder.core.pytree import tree_flatten
from thunder.core.trace import from_trace, tracectx

# Symbols whose re-execution is not a metadata computation: unpacking of inputs, returns, deletions.
_NOT_RECOMPUTED_PREFIXES = ("unpack", "pack_", "python_return", "return", "python_del", "del", "comment")


class TraceCheckError(AssertionError):
    pass


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


def check_metadata(trace) -> None:
    """I1: re-run each top-level symbol and compare dtype, shape and device of its outputs."""
    scratch = from_trace(trace)
    with tracectx(scratch):
        for bsym in trace.bound_symbols:
            if bsym.sym.name.startswith(_NOT_RECOMPUTED_PREFIXES) or bsym.sym.is_fusion:
                continue
            try:
                recomputed = bsym.sym(*bsym.args, **bsym.kwargs)
            except Exception as e:  # a symbol that cannot be re-run on its own recorded arguments
                raise TraceCheckError(f"re-running {bsym.sym.name} of `{_first_line(bsym)}` failed: {e}") from e
            flat_new = tree_flatten(recomputed)[0]
            flat_old = tree_flatten(bsym.output)[0]
            for new, old in zip(flat_new, flat_old):
                if not (isinstance(new, TensorProxy) and isinstance(old, TensorProxy)):
                    continue
                for field in ("dtype", "shape", "device"):
                    want, got = getattr(new, field), getattr(old, field)
                    if want != got:
                        raise TraceCheckError(
                            f"proxy {old.name} is recorded with {field} {got}, but {bsym.sym.name} computes "
                            f"{want}: `{_first_line(bsym)}`"
                        )


def _first_line(bsym) -> str:
    text = str(bsym).strip()
    return text.splitlines()[-1].strip() if text else bsym.sym.name


def check_trace(trace) -> None:
    """Raise TraceCheckError when a trace breaks I1 (metadata) or I2 (unique names)."""
    check_names(trace)
    check_metadata(trace)


def check_traces(jfn) -> int:
    """Check every trace thunder kept for the last call of ``jfn`` (prologue, computation, backward);
    returns how many traces were checked."""
    traces = [
        *thunder.last_prologue_traces(jfn),
        *thunder.last_traces(jfn),
        *(thunder.last_backward_traces(jfn) or []),
    ]
    for i, trace in enumerate(traces):
        try:
            check_trace(trace)
        except TraceCheckError as e:
            raise TraceCheckError(f"trace {i} of {len(traces)}: {e}\n{trace}") from None
    return len(traces)
