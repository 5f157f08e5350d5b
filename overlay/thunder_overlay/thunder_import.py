"""Import thunder for ``status()`` and say plainly why it failed when it does."""

from __future__ import annotations

import sys

# thunder 0.2.x refers to Tensor.align_as at import; torch 2.13 removed it with named tensors.
FIRST_TORCH_WITHOUT_NAMED_TENSORS = (2, 13)


def _torch_version() -> str | None:
    torch = sys.modules.get("torch")
    if getattr(torch, "__version__", None):
        return str(torch.__version__)
    try:
        import importlib.metadata

        return importlib.metadata.version("torch")
    except Exception:
        return None


def _release_tuple(version: str) -> tuple[int, ...]:
    numbers = []
    for part in version.split("+")[0].split("."):
        digits = "".join(c for c in part if c.isdigit()) if part[:1].isdigit() else ""
        if not digits:
            break
        numbers.append(int(digits))
    return tuple(numbers)


def explain(error: BaseException) -> str:
    """The error, and for a torch thunder 0.2.x cannot run with, which torch to install instead."""
    text = f"{type(error).__name__}: {error}"
    torch = _torch_version()
    too_new = torch is not None and _release_tuple(torch) >= FIRST_TORCH_WITHOUT_NAMED_TENSORS
    if "align_as" in text or too_new:
        text += (
            f". thunder 0.2.x cannot be imported with torch {torch or '(version unknown)'}: it uses "
            "Tensor.align_as, which torch 2.13 removed together with named tensors. Install torch<=2.12 "
            "(this project develops and tests with torch==2.9.1), e.g. pip install 'torch==2.9.1'"
        )
    return text


def try_import(module: str) -> BaseException | None:
    """Import ``module`` (through the overlay's finder, when installed); the exception if that fails."""
    import importlib

    try:
        importlib.import_module(module)
    except Exception as e:
        return e
    return None
