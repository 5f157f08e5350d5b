"""What the tools that run one workload of ``bench/workloads.py`` per stock or overlay process share."""

from __future__ import annotations

import os
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parent


def hash_seed() -> str:
    """The hash seed both sides run with: the parent's ``PYTHONHASHSEED``, else 0. Counts of instructions and
    calls depend on it (the order of sets and dicts keyed by strings), so the two sides must share it."""
    seed = os.environ.get("PYTHONHASHSEED", "")
    return seed if seed.isdigit() else "0"


def child_env(overlay: str) -> dict[str, str]:
    """Environment of a child that imports ``workloads`` with the overlay on (``"1"``) or off (``"0"``)."""
    return dict(os.environ, THUNDER_OVERLAY=overlay, PYTHONWARNINGS="ignore", PYTHONHASHSEED=hash_seed(),
                PYTHONPATH=os.pathsep.join(filter(None, [str(BENCH), os.environ.get("PYTHONPATH")])))


def require_workloads(names: list[str]) -> None:
    """Exit with the known names unless every one of ``names`` is a workload; before any child starts."""
    sys.path.insert(0, str(BENCH))
    import workloads  # imports thunder lazily

    known = [w.name for w in workloads.WORKLOADS]
    unknown = [name for name in names if name not in known]
    if unknown:
        sys.exit(f"unknown workload(s) {', '.join(unknown)}; choose from {', '.join(known)}")
