"""Where a benchmark runs: a device plus the thunder executors to jit with.

``cpu-torch`` uses the torch executor on CPU; ``cuda-torch`` the torch executor on CUDA;
``cuda-nvfuser`` nvFuser first, then torch.  :func:`resolve` skips (never fakes) a target the
machine cannot run.
"""

from __future__ import annotations

from dataclasses import dataclass

import pytest

TARGETS = ("cpu-torch", "cuda-torch", "cuda-nvfuser")


@dataclass(frozen=True)
class Target:
    name: str
    device: str
    executors: tuple

    def sync(self) -> None:
        if self.device == "cuda":
            import torch

            torch.cuda.synchronize()


def resolve(name: str) -> Target:
    """The :class:`Target` for ``name``; ``pytest.skip`` when CUDA or nvFuser is missing."""
    import torch
    import thunder

    device = name.split("-")[0]
    if name.endswith("nvfuser"):
        import nvfuser_stack

        # what the stack rules out says more than "no CUDA": a wheel for another torch, or without the
        # module this thunder imports at every fusion call
        if (why := nvfuser_stack.problem(torch.__version__)) is not None:
            pytest.skip(f"nvFuser cannot run here: {why}")
    if device == "cuda" and not torch.cuda.is_available():
        pytest.skip("CUDA is not available on this machine")
    if name.endswith("nvfuser"):
        from thunder.executors import nvfuser_available

        if not nvfuser_available():
            pytest.skip(f"nvFuser is not importable (needs an nvfuser wheel built for torch {torch.__version__})")
        executors = ("nvfuser", "torch")
    else:
        executors = ("torch",)
    # resolve names now, so a misconfigured thunder fails here and not inside a timed region
    resolved = tuple(thunder.extend.get_executor(e) for e in executors)
    assert all(resolved), f"thunder does not know executors {executors}"
    return Target(name, device, resolved)


def nvfuser_version() -> str | None:
    try:
        import nvfuser  # noqa: F401
    except Exception:
        return None
    return getattr(nvfuser, "__version__", "unknown")
