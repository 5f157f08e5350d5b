"""The autocast chain forward and backward (torch.autograd.grad), compared with float64 gradients.
Stock thunder fails it with the same swap-by-name defect as the forward-only chain."""

import torch
import thunder
from thunder.transforms.autocast import autocast

from thunder_overlay.checks import check_traces
from thunder_overlay.reproducers._common import assert_close, float64_copies, inputs
from thunder_overlay.reproducers.autocast_chain import f


def run() -> str:
    args = inputs(3, requires_grad=True)
    jfn = thunder.jit(autocast(f, dtype=thunder.bfloat16))
    out = jfn(*args)
    grads = torch.autograd.grad(out.sum(), args)
    ref_args = float64_copies(args)
    ref_out = f(*ref_args)
    ref_grads = torch.autograd.grad(ref_out.sum(), ref_args)
    assert_close(out, ref_out, "bfloat16")
    worst = max(assert_close(g, r, "bfloat16", f"grad of {n}") for g, r, n in zip(grads, ref_grads, "abc"))
    return f"worst grad rel. error {worst:.1e}, {check_traces(jfn).traces} traces checked"


if __name__ == "__main__":
    print(run())
