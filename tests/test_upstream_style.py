"""The patched files read as upstream code: thunder's ruff configuration finds nothing the patches add."""

import subprocess
import sys
from pathlib import Path

import pytest

from thunder_overlay.patchset import apply_series, read_series

from conftest import installed_base, installed_file

# thunder's [tool.ruff] settings on main and 0.2.6 (pyproject.toml), with the ruff its pre-commit pins
RUFF_VERSION = "0.14.0"
RUFF_SETTINGS = ["--isolated", "--line-length", "120", "--target-version", "py310"]
RUFF_CHECK = ["--select", "E,W,F,RUF100", "--ignore", "E731,E501,F821,E402,F405,E712,E721,E722"]


def ruff(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "ruff", *args], capture_output=True, text=True, cwd=cwd)


@pytest.fixture(scope="module")
def stock_and_patched(tmp_path_factory):
    if ruff("--version", cwd=Path.cwd()).stdout.split()[-1:] != [RUFF_VERSION]:
        pytest.fail(f"ruff=={RUFF_VERSION} (thunder's pre-commit pin) is not installed: pip install -r requirements-dev.txt")
    base = installed_base()
    folder = tmp_path_factory.mktemp("ruff")
    for path in base.files:  # every file of thunder the series changes, stock and patched
        text = installed_file(path).read_text()
        for side, content in (("stock", text), ("patched", apply_series(text, read_series(base.directory), path))):
            (folder / side / path).parent.mkdir(parents=True, exist_ok=True)
            (folder / side / path).write_text(content)
    return folder


def findings(folder: Path, side: str) -> list[str]:
    """ruff's findings (file, rule and offending line, without line numbers) and ruff format's changed lines."""
    check = ruff("check", *RUFF_SETTINGS, *RUFF_CHECK, "--output-format", "concise", "thunder", cwd=folder / side)
    found = []
    for line in check.stdout.splitlines():
        parts = line.split(":", 3)
        if len(parts) == 4 and parts[1].isdigit():
            lines = (folder / side / parts[0]).read_text().splitlines()
            found.append(f"{parts[0]} {parts[3].split()[0]} {lines[int(parts[1]) - 1].strip()}")
    diff = ruff("format", *RUFF_SETTINGS, "--diff", "thunder", cwd=folder / side).stdout
    found += [f"format {line}" for line in diff.splitlines() if line[:1] in "+-" and line[:3] not in ("+++", "---")]
    return sorted(found)


def test_patches_add_no_ruff_finding_and_no_formatting_change(stock_and_patched):
    # Where the release's own file is clean (0.2.6, main), this is `ruff format --check` and `ruff check` passing
    assert findings(stock_and_patched, "patched") == findings(stock_and_patched, "stock")


def test_a_line_too_long_for_thunder_is_caught(stock_and_patched):
    patched = stock_and_patched / "patched" / "thunder" / "core" / "jit_ext.py"
    text = patched.read_text()
    patched.write_text(text + "\n\ndef _f(a):\n    return [a, a, a, a, a, a, a, a, a, a, a, a, a, a, a, a, a, a, a, a, a, a, a, a, a, a, a, a, a, a, a, a, a, a, a, a, a, a]\n")
    try:
        assert findings(stock_and_patched, "patched") != findings(stock_and_patched, "stock")
    finally:
        patched.write_text(text)
