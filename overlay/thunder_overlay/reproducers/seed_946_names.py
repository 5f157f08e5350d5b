"""Upstream #946: jitting trace.python_callable() must keep the trace's names.

Stock thunder drops a rename when the wanted name is held by a generated name of a temporary that never
reaches the trace: it keeps 1 of the 8 names (``t2`` for the user's ``t1``, every later name shifted).
"""

import torch
import thunder
from thunder import clang

from thunder_overlay.checks import check_traces


def func(x, y, device):
    a = x * y
    b = y / x
    c = x * y
    d = y / x
    z = a * b
    w = c * d
    m = w * 1
    a = clang.uniform(w.shape, device=device, dtype=thunder.float16)
    return z, w, m, a


def output_names(trace) -> list[str]:
    return [o.name for b in trace.bound_symbols for o in b.flat_proxy_outs if b.sym.name != "unpack_trivial"]


def run() -> str:
    x, y = torch.randn(3, 4), torch.randn(3, 4)
    source = thunder.trace()(func, x, y, "cpu")
    jfn = thunder.jit(source.python_callable(), executors=["torch"])
    jfn(x, y, device="cpu")
    want, got = output_names(source), output_names(thunder.last_traces(jfn)[0])
    kept = sum(a == b for a, b in zip(want, got))
    if got != want:
        raise AssertionError(f"kept {kept} of {len(want)} names: {', '.join(got)}")
    return f"kept {kept} of {len(want)} names, {check_traces(jfn).traces} traces checked"


if __name__ == "__main__":
    print(run())
