"""The command line as a new user meets it: --version, a status that reads, the cache command, and `names`
refusing a bad target at once (exit 2) instead of running thunder twice."""

import json
import os
import subprocess
import sys
import time

import pytest

from conftest import run_python

CLI = [sys.executable, "-m", "thunder_overlay.cli"]


def cli(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=600,
                          env=dict(os.environ, PYTHONWARNINGS="default", **(env or {})))


def test_version_is_the_packages():
    from thunder_overlay import __version__

    proc = cli("--version")
    assert proc.returncode == 0 and proc.stdout.strip() == f"thunder-overlay {__version__}"


@pytest.mark.slow
def test_status_shows_the_overlay_version_and_one_patch_a_line():
    from thunder_overlay import __version__

    proc = cli("status")
    report = json.loads(cli("status", "--json").stdout)
    assert report["overlay_version"] == __version__
    lines = proc.stdout.splitlines()
    assert f"  overlay_version   {__version__}" in lines
    assert [line.split()[-1] for line in lines if line.startswith("  patch ")] == report["patches"]


def test_a_disabled_overlay_says_so_without_a_meaningless_known_line():
    proc = cli("status", env={"THUNDER_OVERLAY": "0"})
    assert proc.returncode == 0 and proc.stdout.startswith("thunder-overlay: disabled")
    assert "known" not in proc.stdout and "overlay_version" in proc.stdout


def test_cache_command_lists_and_clears_the_entries(tmp_path):
    env = {"THUNDER_OVERLAY_CACHE_DIR": str(tmp_path)}
    assert run_python("import thunder", env=env).returncode == 0
    listed = json.loads(cli("cache", "--json", env=env).stdout)
    (entry,) = listed["entries"]
    assert listed["folder"] == str(tmp_path) and listed["off"] is None
    assert entry["problem"] is None and entry["thunder"].endswith("thunder") and entry["bytes"] > 0
    assert entry["path"] in cli("cache", env=env).stdout
    cleared = cli("cache", "--clear", env=env)
    assert cleared.returncode == 0 and entry["path"] in cleared.stdout and list(tmp_path.iterdir()) == []
    assert "no entries" in cli("cache", env=env).stdout


@pytest.mark.parametrize("target, says", [
    ("missing.py:forward", "no such file: missing.py"),
    ("model.py:nothing", "model.py defines no nothing"),
    ("no_inputs.py:forward", "defines neither forward_inputs() nor inputs()"),
    ("model.py", "is not FILE.py:NAME or package.module:NAME"),
    ("no.such.package:forward", "no module named no"),
])
def test_names_refuses_a_bad_target_before_starting_any_process(tmp_path, target, says):
    (tmp_path / "model.py").write_text("def forward(x):\n    return x * 2\ndef inputs():\n    return (1,)\n")
    (tmp_path / "no_inputs.py").write_text("def forward(x):\n    return x * 2\n")
    start = time.monotonic()
    proc = subprocess.run([*CLI, "names", target], capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert proc.returncode == 2, (proc.returncode, proc.stdout, proc.stderr)
    assert "thunder-overlay names: error: " in proc.stderr and says in proc.stderr, proc.stderr
    assert "_thunder_overlay_names_" not in proc.stderr and proc.stdout == ""
    assert time.monotonic() - start < 10, "no thunder process was started"


@pytest.mark.slow
def test_names_json_reports_a_program_and_exits_0(tmp_path):
    (tmp_path / "model.py").write_text(
        "import torch\n"
        "def forward(x):\n    hidden = torch.tanh(x)\n    return hidden * 2\n"
        "def forward_inputs():\n    return (torch.ones(2, 2),)\n")
    proc = subprocess.run([*CLI, "names", "--json", "model.py:forward"], capture_output=True, text=True, timeout=600,
                          cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    out = json.loads(proc.stdout)
    (program,) = out["programs"]
    assert out["exit_status"] == 0 and out["lost"] == 0 and program["lost"] == [] and program["error"] is None
    assert program["overlay_named"] >= 1


@pytest.mark.slow
def test_verify_explains_what_passes_on_stock_and_shows_failures_whole_with_full():
    proc = cli("verify", "--full")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "5 of 5 programs pass with the overlay" in proc.stdout
    # the table cuts a failure to its last line; --full prints the whole of each failing run after it
    whole = proc.stdout.split("--- autocast_chain (stock), everything it printed:\n", 1)
    assert len(whole) == 2 and "Traceback (most recent call last)" in whole[1].split("\n---", 1)[0], proc.stdout
    assert "seed_283_autocast passes on stock: #283's program as reported" in proc.stdout
