"""Shared by the reproducers: inputs and the float64 reference."""

import torch

# Relative error allowed against the float64 reference, by compute dtype of the autocast region.
TOLERANCE = {"bfloat16": 5e-2, "float16": 1e-2, "float32": 1e-5}


def inputs(n: int, shape=(2, 2), requires_grad: bool = False, seed: int = 0) -> list[torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    return [torch.randn(shape, generator=gen).requires_grad_(requires_grad) for _ in range(n)]


def relative_error(actual: torch.Tensor, reference: torch.Tensor) -> float:
    actual, reference = actual.detach().double(), reference.detach().double()
    return float((actual - reference).norm() / reference.norm().clamp_min(1e-12))


def assert_close(actual: torch.Tensor, reference: torch.Tensor, dtype_name: str, what: str = "result") -> float:
    err = relative_error(actual, reference)
    if not err < TOLERANCE[dtype_name]:
        raise AssertionError(f"{what} differs from float64 eager by {err:.3g} (> {TOLERANCE[dtype_name]})")
    return err


def float64_copies(tensors):
    return [t.detach().double().requires_grad_(t.requires_grad) for t in tensors]
