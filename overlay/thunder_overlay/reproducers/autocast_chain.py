"""The autocast chain (the README's first example): crashes stock thunder 0.2.1 ... 0.2.6 under autocast, bf16 and fp16.

A rename recorded for the float32 ``t2`` of the trace that autocast constructs lands on the bfloat16
``t2`` of the computation trace; compilation then fails with "Expected a.dtype=float32 and
b.dtype=bfloat16 to be the same".
"""

import thunder
from thunder.transforms.autocast import autocast

from thunder_overlay.checks import check_traces
from thunder_overlay.reproducers._common import assert_close, float64_copies, inputs


def f(a, b, c):
    u = a @ b
    v = u @ c
    return v + c


def run() -> str:
    details = []
    for dtype in ("bfloat16", "float16"):
        args = inputs(3)
        jfn = thunder.jit(autocast(f, dtype=getattr(thunder, dtype)))
        err = assert_close(jfn(*args), f(*float64_copies(args)), dtype)
        details.append(f"{dtype} rel. error {err:.1e}, {check_traces(jfn).traces} traces checked")
    return "; ".join(details)


if __name__ == "__main__":
    print(run())
