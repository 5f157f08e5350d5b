"""The #283 seed's computation trace under autocast is named by the user, not by thunder's own locals.

Stock thunder names proxies after locals of thunder modules (``result`` in trace_interpreter.py,
``tree``, the ``a``/``b`` of autocast rules) and shows the user's parameter ``c`` as ``t_2``.
"""

import thunder
from thunder.transforms.autocast import autocast

from thunder_overlay.reproducers.seed_283_autocast import h
from thunder_overlay.reproducers._common import inputs

THUNDER_LOCALS = {"result", "tree", "x", "obj", "fn", "res", "out", "proxy"}


def run() -> str:
    jfn = thunder.jit(autocast(h, dtype=thunder.bfloat16))
    jfn(*inputs(3))
    trace = thunder.last_traces(jfn)[0]
    args = [p.name for p in trace.args]
    outputs = {o.name for b in trace.bound_symbols if b.sym.name != "unpack_trivial" for o in b.flat_proxy_outs}
    leaked = sorted(outputs & (THUNDER_LOCALS | {"a", "b"}))
    if args != ["a", "b", "c"] or leaked:
        raise AssertionError(f"arguments {args}, thunder locals naming proxies: {leaked}")
    return "arguments a, b, c; no thunder locals"


if __name__ == "__main__":
    print(run())
