"""gpu.sh's preflight (bench/nvfuser_stack.py) tells before any timing what the nvFuser cases can do, and the
benchmark's cuda-nvfuser cases skip with the same reason. The stacks are made here as installs of a wheel
that cannot serve (a dist-info and the module it ships): one built for another torch, one without the legacy
``nvfuser`` module that thunder 0.2.6 imports at every fusion call (what the nvFuser 0.2.36 wheels are)."""

import json
import os
import subprocess
import sys

import pytest

from conftest import REPO

pytestmark = pytest.mark.skipif(
    __import__("importlib").util.find_spec("nvfuser") is not None, reason="a real nvFuser is installed here"
)


def install_wheel(site, name: str, version: str, modules: tuple[str, ...]) -> None:
    """What pip leaves for a wheel: its dist-info (METADATA, RECORD) and its top-level modules."""
    dist_info = site / f"{name.replace('-', '_')}-{version}.dist-info"
    dist_info.mkdir(parents=True)
    (dist_info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
    records = [f"{dist_info.name}/METADATA,,"]
    for module in modules:
        (site / module).mkdir()
        (site / module / "__init__.py").write_text("")
        records.append(f"{module}/__init__.py,,")
    (dist_info / "RECORD").write_text("\n".join(records) + "\n")


def preflight(site, tmp_path) -> tuple[int, str, dict]:
    out = tmp_path / "preflight.json"
    proc = subprocess.run([sys.executable, str(REPO / "bench" / "nvfuser_stack.py"), "--json", str(out)],
                          capture_output=True, text=True, timeout=300, env=dict(os.environ, PYTHONPATH=str(site)))
    return proc.returncode, proc.stdout + proc.stderr, json.loads(out.read_text()) if out.exists() else {}


def bench_skips(site) -> str:
    proc = subprocess.run([sys.executable, "-m", "pytest", str(REPO / "bench"), "-q", "-rs", "-p", "no:cacheprovider",
                           "--bench-quick", "-k", "cuda-nvfuser and seed946"], capture_output=True, text=True,
                          timeout=600, cwd=REPO, env=dict(os.environ, PYTHONPATH=str(site)))
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    return proc.stdout


@pytest.mark.slow
def test_a_wheel_for_another_torch_is_named_and_the_nvfuser_cases_skip_with_that_reason(tmp_path):
    import torch

    install_wheel(tmp_path / "site", "nvfuser-cu128-torch210", "0.2.36", ("nvfuser_direct",))
    rc, printed, facts = preflight(tmp_path / "site", tmp_path)
    why = f"nvfuser-cu128-torch210 0.2.36 is built for torch 2.10, and this is torch {torch.__version__}"
    assert rc == 3 and f"cuda-nvfuser  skips: {why}" in printed, printed
    assert "nvFuser wheel: nvfuser-cu128-torch210 0.2.36, built for torch 2.10, modules nvfuser_direct" in printed
    assert facts["targets"]["cuda-nvfuser"] == why and facts["targets"]["cpu-torch"] is None
    skips = bench_skips(tmp_path / "site")
    assert "SKIPPED [4] bench/targets.py:" in skips and f": nvFuser cannot run here: {why}" in skips, skips


@pytest.mark.slow
def test_a_wheel_without_the_module_thunder_calls_is_named(tmp_path):
    import torch

    sys.path.insert(0, str(REPO / "bench"))
    import nvfuser_stack

    if nvfuser_stack.thunder_needs() != "nvfuser":
        pytest.skip("this thunder imports no legacy nvfuser module at fusion calls (upstream main)")
    minor = "".join(torch.__version__.split("+")[0].split(".")[:2])
    name = f"nvfuser-cu128-torch{minor}"
    install_wheel(tmp_path / "site", name, "0.2.36", ("nvfuser_direct",))
    rc, printed, facts = preflight(tmp_path / "site", tmp_path)
    assert rc == 3, printed
    assert facts["targets"]["cuda-nvfuser"] == (
        f"thunder's nvFuser executor imports nvfuser at every fusion call, and the installed nvFuser ({name} 0.2.36) "
        "ships nvfuser_direct")
    assert "nvFuser cannot run here: thunder's nvFuser executor imports nvfuser" in bench_skips(tmp_path / "site")
