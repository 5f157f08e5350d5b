"""bench/fusion_identity.py: the comparator it uses (thunder_overlay.equivalence) on real thunder traces of a bench
workload (any Python, no nvFuser), and the whole check failing on a one-op change (only where the nvFuser
environment, .venv312, exists)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest

from conftest import REPO, requires_overlay
from thunder_overlay import equivalence

CAPTURE = REPO / "bench" / "fusion_capture.py"
CHECK = REPO / "bench" / "fusion_identity.py"
VENV312 = REPO / ".venv312" / "bin" / "python"

# Stock and overlay each compile models in processes of their own: minutes
pytestmark = pytest.mark.slow


def capture(overlay: str, workload: str, mode: str) -> dict:
    """The torch executor's final traces of a bench workload on fake cuda:0 inputs (no stand-in: the torch
    executor needs no device to trace)."""
    env = dict(os.environ, THUNDER_OVERLAY=overlay)
    env.pop("LD_PRELOAD", None)
    proc = subprocess.run(
        [sys.executable, str(CAPTURE), workload, "--modes", mode, "--executors", "torch"],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    (case,) = json.loads(proc.stdout.splitlines()[-1])["cases"]
    assert "error" not in case, case.get("traceback")
    return case


def _thunder_refuses_cuda_without_a_device() -> str | None:
    """Releases before 0.2.5 check torch.cuda.device_count() when a CUDA device is named
    (thunder/core/devices.py), so fake cuda:0 inputs cannot be traced without a device or the stand-in."""
    from thunder.core import devices

    try:
        devices.Device("cuda:0")
    except RuntimeError as e:
        return f"thunder {thunder_version()} refuses a cuda device where torch sees none: {e}"
    return None


def thunder_version() -> str:
    import thunder

    return thunder.__version__


@pytest.fixture(scope="module")
def autocast_seed_grad():
    """Stock and overlay traces of the autocast seed with gradients: one proxy is named differently."""
    refused = _thunder_refuses_cuda_without_a_device()
    if refused:
        pytest.skip(refused)
    return {side: capture(switch, "autocast-seed", "grad") for side, switch in (("stock", "0"), ("overlay", "1"))}


def _traces(sides, which):
    s, o = sides["stock"][which], sides["overlay"][which]
    return s["text"], s["proxies"], o["text"], o["proxies"]


@requires_overlay
@pytest.mark.parametrize("which", ["forward", "backward"])
def test_stock_and_overlay_traces_are_equal_up_to_renaming(autocast_seed_grad, which):
    stock_text, stock_names, overlay_text, overlay_names = _traces(autocast_seed_grad, which)
    result = equivalence.match(stock_text, stock_names, overlay_text, overlay_names)
    assert result.difference is None, str(result.difference)
    if which == "forward":  # the overlay names the autocast output after the user's variable
        assert stock_text != overlay_text and result.renaming, "expected the overlay to rename a proxy here"


@requires_overlay
def test_an_inconsistent_renaming_is_a_difference(autocast_seed_grad):
    stock_text, stock_names, overlay_text, overlay_names = _traces(autocast_seed_grad, "forward")
    # one use of a proxy now names another proxy: the same program text, but not a bijection of names
    used = [n for n in overlay_names if len(re.findall(rf"\b{n}\b", overlay_text)) > 1]
    victim, other = used[0], used[1]
    last = [m.start() for m in re.finditer(rf"\b{victim}\b", overlay_text)][-1]
    changed = overlay_text[:last] + other + overlay_text[last + len(victim) :]
    difference = equivalence.compare(stock_text, stock_names, changed, overlay_names)
    assert difference is not None and "not consistent" in difference.why, difference


@requires_overlay
def test_a_changed_op_is_a_difference(autocast_seed_grad):
    stock_text, stock_names, overlay_text, overlay_names = _traces(autocast_seed_grad, "backward")
    op = re.search(r"= torch\.(\w+)\(", overlay_text).group(1)
    changed = overlay_text.replace(f"torch.{op}(", "torch.sub(" if op != "sub" else "torch.add(", 1)
    difference = equivalence.compare(stock_text, stock_names, changed, overlay_names)
    assert difference is not None and difference.why == "different text", difference


@requires_overlay
def test_a_consistent_renaming_is_found(autocast_seed_grad):
    stock_text, stock_names, overlay_text, overlay_names = _traces(autocast_seed_grad, "forward")
    name = next(n for n in overlay_names if n.startswith("t") and n[1:].isdigit())
    renamed = re.sub(rf"\b{name}\b", "renamed_by_test", overlay_text)
    names = [n if n != name else "renamed_by_test" for n in overlay_names]
    result = equivalence.match(overlay_text, overlay_names, renamed, names)
    assert result.difference is None and result.renaming == {name: "renamed_by_test"}


def _nvfuser_env_missing() -> str | None:
    if not VENV312.exists():
        return f"no nvFuser environment ({VENV312.relative_to(REPO)}; bench/setup-nvfuser.sh builds it)"
    probe = subprocess.run(
        [str(VENV312), "-c", "import importlib.util as u; print(u.find_spec('nvfuser_direct') is not None)"],
        capture_output=True,
        text=True,
    )
    if probe.stdout.strip() != "True":
        return f"{VENV312.relative_to(REPO)} has no nvfuser_direct (the nvfuser-cu128-torch29 wheel)"
    return None


requires_nvfuser_env = pytest.mark.skipif(_nvfuser_env_missing() is not None, reason=str(_nvfuser_env_missing()))

# chain-100's op v7 is `v6 + 0.25`; the copy makes it `v6 - 0.25` and leaves the other 99 ops alone
CHAIN_OP = 'lines.append(f"    v{i} = {_CHAIN_OPS[i % len(_CHAIN_OPS)].format(prev=prev)}")'
CHANGED_OP = (
    "lines.append(f\"    v{i} = {(_CHAIN_OPS[i % len(_CHAIN_OPS)] if i != 7 else '{prev} - 0.25').format(prev=prev)}\")"
)


def run_check(tmp_path, workloads_copy):
    env = dict(os.environ)
    env.pop("LD_PRELOAD", None)
    cmd = [
        str(VENV312),
        str(CHECK),
        "--workloads",
        "chain-100",
        "--modes",
        "grad",
        "--executors",
        "nvfuser",
        "--cache-dir",
        str(tmp_path / "standin"),
        "--overlay-workloads",
        str(workloads_copy),
    ]
    return subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=1200)


@requires_nvfuser_env
def test_the_check_reports_a_one_op_change_as_different(tmp_path):
    source = (REPO / "bench" / "workloads.py").read_text()
    assert source.count(CHAIN_OP) == 1
    (tmp_path / "same").mkdir()
    (tmp_path / "changed").mkdir()
    (tmp_path / "same" / "workloads.py").write_text(source)
    (tmp_path / "changed" / "workloads.py").write_text(source.replace(CHAIN_OP, CHANGED_OP))

    same = run_check(tmp_path, tmp_path / "same" / "workloads.py")
    if same.returncode == 3:  # the check compared nothing (e.g. an older thunder on PYTHONPATH without nvFuser)
        pytest.skip("the check skipped the nvFuser case here: " + " ".join(
            line.strip() for line in same.stdout.splitlines() if "NOT compared" in line or "skipped:" in line))
    assert same.returncode == 0, same.stdout[-3000:] + same.stderr[-2000:]
    assert re.search(r"\| chain-100 \| grad \| nvfuser +\| \d+/\d+ +\| [1-9]\d* +\|.*\| identical", same.stdout), (
        same.stdout
    )

    changed = run_check(tmp_path, tmp_path / "changed" / "workloads.py")
    assert changed.returncode == 1, changed.stdout[-3000:] + changed.stderr[-2000:]
    assert re.search(r"\| chain-100 \| grad \| nvfuser .*\| different", changed.stdout), changed.stdout
    # the trace and the region's FusionDefinition both show the changed op
    assert "forward trace, line" in changed.stdout
    assert re.search(r"FusionDefinition:\n(.*\n)*? +[-+] .*fd\.ops\.(sub|add)", changed.stdout), changed.stdout


# Installed ahead of every other finder in both sides' processes: the legacy `nvfuser` module is not there,
# as with the nvFuser 0.2.36 wheels (nvfuser_direct only).
HIDE_LEGACY_NVFUSER = """
import sys
class _NoLegacyNvFuser:
    def find_spec(self, name, path=None, target=None):
        if name == "nvfuser" or name.startswith("nvfuser."):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None
sys.meta_path.insert(0, _NoLegacyNvFuser())
"""


@requires_nvfuser_env
def test_the_check_reports_cannot_run_where_the_first_call_needs_a_missing_module(tmp_path):
    needs = subprocess.run([str(VENV312), "-c", "import sys; sys.path.insert(0, 'bench'); import nvfuser_stack; "
                            "print(nvfuser_stack.thunder_needs())"], capture_output=True, text=True, cwd=REPO)
    if needs.stdout.strip() != "nvfuser":
        pytest.skip("this thunder imports no legacy nvfuser at a region's first call (upstream main)")
    (tmp_path / "hide").mkdir()
    (tmp_path / "hide" / "sitecustomize.py").write_text(HIDE_LEGACY_NVFUSER)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in (str(tmp_path / "hide"), os.environ.get("PYTHONPATH"))
                                                       if p))
    env.pop("LD_PRELOAD", None)
    proc = subprocess.run([str(VENV312), str(CHECK), "--workloads", "seed946", "--modes", "inference", "--executors",
                           "nvfuser", "--cache-dir", str(tmp_path / "standin")],
                          capture_output=True, text=True, env=env, timeout=1200)
    out = proc.stdout
    assert proc.returncode == 3, out[-3000:] + proc.stderr[-2000:]
    assert re.search(r"\| seed946 +\| inference +\| nvfuser +\|.*\| cannot run +\|", out), out
    assert "stock cannot run nvFuser here, nor the overlay: thunder's first call of nvFusion0 imports nvfuser" in out
