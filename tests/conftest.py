"""Shared helpers: every overlay-on/off comparison runs real thunder in a fresh subprocess."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PATCHES = REPO / "patches"


def run_python(
    *code: str, overlay: str = "1", env: dict | None = None, args=(), timeout: int = 600, inherit_pythonpath=True
):
    """Run the code parts, one after the other, in a fresh interpreter of this environment (start-up hook
    included). A PYTHONPATH in ``env`` goes before the one the version matrix set, unless told not to."""
    full_env = dict(os.environ, THUNDER_OVERLAY=overlay, PYTHONWARNINGS="default")
    full_env.pop("THUNDER_OVERLAY_PATCHES", None)
    env = dict(env or {})
    if "PYTHONPATH" in env and os.environ.get("PYTHONPATH") and inherit_pythonpath:  # keep the matrix's release
        env["PYTHONPATH"] += os.pathsep + os.environ["PYTHONPATH"]
    full_env.update(env)
    return subprocess.run(
        [sys.executable, *args, "-c", "\n".join(textwrap.dedent(part) for part in code)],
        env=full_env, capture_output=True, text=True, timeout=timeout,
    )


def overlay_active() -> bool:
    from thunder_overlay import status

    return status()["state"] in ("patched", "ready")


# Tests of what the patches do; they need the series applied in this process
requires_overlay = pytest.mark.skipif(not overlay_active(), reason="the overlay's series is not active in this process")


# A small jit that must work whenever the overlay refuses: stock thunder keeps running.
JIT_STILL_WORKS = """
import torch, thunder
out = thunder.jit(lambda a, b: a * b + 1)(torch.ones(2), torch.full((2,), 2.0))
assert out.tolist() == [3.0, 3.0], out
print("jit works")
"""


@pytest.fixture(scope="session")
def thunder_copy(tmp_path_factory) -> Path:
    """A copy of the installed thunder 0.2.6 (package and dist-info) in a --target style directory."""
    import thunder

    site = Path(thunder.__file__).parents[1]
    target = tmp_path_factory.mktemp("thunder-copy")
    shutil.copytree(site / "thunder", target / "thunder", ignore=shutil.ignore_patterns("__pycache__", "tests"))
    (dist,) = site.glob("lightning_thunder-*.dist-info")
    shutil.copytree(dist, target / dist.name)
    return target


@pytest.fixture
def patches_copy(tmp_path) -> Path:
    """A copy of the patches directory, for the explicit THUNDER_OVERLAY_PATCHES override."""
    shutil.copytree(PATCHES, tmp_path / "patches")
    return tmp_path / "patches"
