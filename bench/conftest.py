"""pytest configuration of the benchmark suite: mode options, case generation and run metadata.

Modes: ``--bench-quick`` (the CI subset with few rounds), default, ``--bench-full`` (adds the
N=10000 scaling point) and ``--bench-large`` (adds the larger litgpt configuration);
``--bench-threads`` pins torch's CPU threads (default 1).  Every saved run records the overlay
side ("stock" when THUNDER_OVERLAY=0, else "overlay"), the overlay's own status and the versions
of thunder, torch and nvFuser.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))  # works under any --import-mode

import targets  # noqa: E402
import workloads  # noqa: E402


def pytest_addoption(parser):
    group = parser.getgroup("thunder-overlay bench")
    group.addoption("--bench-quick", action="store_true", help="CI subset with few rounds")
    group.addoption("--bench-full", action="store_true", help="add the N=10000 scaling point")
    group.addoption("--bench-large", action="store_true", help="add the larger litgpt configuration")
    group.addoption(
        "--bench-threads", type=int, default=1, help="torch CPU threads (default 1: steadier on a shared machine)"
    )


def pytest_configure(config):
    # thunder 0.2.6 warns on every call under torch 2.9; recording that inside timed calls costs time
    config.addinivalue_line("filterwarnings", "ignore:torch.is_autocast_cpu_enabled:DeprecationWarning")
    config.addinivalue_line("filterwarnings", "ignore:transformer_engine module not found:UserWarning")


def bench_mode(config) -> str:
    if config.getoption("--bench-quick"):
        return "quick"
    return "full" if config.getoption("--bench-full") else "default"


def selected(config, w: workloads.Workload, measure: str) -> bool:
    mode = bench_mode(config)
    if w.tier == "large":
        return bool(config.getoption("--bench-large"))
    if mode == "quick":
        return w.tier == "quick" and (measure == "compile" or w.exec_in_quick)
    return w.tier != "full" or mode == "full"


def pytest_generate_tests(metafunc):
    if "case" not in metafunc.fixturenames:
        return
    measure = metafunc.function.__name__.removeprefix("test_")
    params = [
        pytest.param(
            (w, t),
            id=f"{w.name}-{t}",
            marks=pytest.mark.benchmark(group=f"{w.name}/{measure}/{t}"),
        )
        for w in workloads.WORKLOADS
        if selected(metafunc.config, w, measure)
        for t in targets.TARGETS
    ]
    metafunc.parametrize("case", params)


# --- overlay side and status -------------------------------------------------------------------


def overlay_side() -> str:
    return "stock" if os.environ.get("THUNDER_OVERLAY") == "0" else "overlay"


def overlay_status() -> dict:
    import thunder  # noqa: F401  (the overlay reports "patched" only once thunder is imported)

    try:
        import thunder_overlay
    except ImportError:
        return {"state": "absent", "patches": []}
    try:
        return dict(thunder_overlay.status())
    except Exception as e:  # a broken overlay must not hide the numbers
        return {"state": f"error: {type(e).__name__}: {e}", "patches": []}


@pytest.fixture(scope="session")
def overlay_info() -> dict:
    status = overlay_status()
    return {"side": overlay_side(), "state": status.get("state"), "patches": list(status.get("patches") or [])}


@pytest.fixture(autouse=True)
def _tag_benchmark(request, overlay_info):
    if "benchmark" in request.fixturenames:
        extra = request.getfixturevalue("benchmark").extra_info
        extra["overlay"] = overlay_info["side"]
        extra["overlay_state"] = overlay_info["state"]
        extra["bench_mode"] = bench_mode(request.config)


@pytest.fixture(scope="session", autouse=True)
def _warm_thunder(request):
    """Pin torch's CPU threads and pay thunder's one-time lazy initialisation before the first timed compile."""
    import thunder
    import torch

    if request.config.getoption("--bench-threads") > 0:
        torch.set_num_threads(request.config.getoption("--bench-threads"))
    thunder.jit(lambda x: x * 2 + 1, executors=["torch"])(torch.ones(2))


@pytest.fixture(scope="session")
def mode(request) -> str:
    return bench_mode(request.config)


@pytest.hookimpl(optionalhook=True)
def pytest_benchmark_update_machine_info(config, machine_info):
    import thunder
    import torch

    status = overlay_status()
    machine_info["thunder_overlay"] = {
        "THUNDER_OVERLAY": os.environ.get("THUNDER_OVERLAY"),
        "side": overlay_side(),
        "state": status.get("state"),
        "patches": list(status.get("patches") or []),
        "thunder_path": os.path.dirname(thunder.__file__),
    }
    machine_info["thunder_version"] = getattr(thunder, "__version__", None)
    machine_info["torch_version"] = torch.__version__
    machine_info["nvfuser_version"] = targets.nvfuser_version()
    machine_info["cuda_device"] = torch.cuda.get_device_name() if torch.cuda.is_available() else None
    machine_info["bench_mode"] = bench_mode(config)
    machine_info["torch_threads"] = config.getoption("--bench-threads")
