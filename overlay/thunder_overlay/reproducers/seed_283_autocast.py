"""Upstream #283 as reported: thunder.jit(autocast((a @ b) + c, bfloat16)) on float32 inputs.

On 0.2.6 this exact program passes stock only because generated names shifted; the swap-by-name
defect behind it is exercised by autocast_chain.
"""

import thunder
from thunder.transforms.autocast import autocast

from thunder_overlay.checks import check_traces
from thunder_overlay.reproducers._common import assert_close, float64_copies, inputs

# What verify prints when stock passes this program
STOCK_PASSES = ("#283's program as reported: on these releases its side trace's generated names no longer meet the "
                "computation's, so stock passes by luck of names (upstream closed #283 as working); autocast_chain "
                "is the same defect with names that still meet, and stock fails it")


def h(a, b, c):
    return (a @ b) + c


def run() -> str:
    args = inputs(3)
    jfn = thunder.jit(autocast(h, dtype=thunder.bfloat16))
    err = assert_close(jfn(*args), h(*float64_copies(args)), "bfloat16")
    return f"rel. error {err:.1e}, {check_traces(jfn).traces} traces checked"


if __name__ == "__main__":
    print(run())
