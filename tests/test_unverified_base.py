"""A jit_ext.py that is no known base (a newer thunder, upstream main) is refused unless
THUNDER_OVERLAY_BASE names a series, and then patched only when every hunk applies with exact context.

The unknown files are made from a copy of the installed one: lines added far from the hunks (every hunk
then applies at an offset, as the series do on upstream main) or a context line of a hunk changed."""

import hashlib
import re
from pathlib import Path

import pytest

from conftest import IMPORT_AND_STATUS, JIT_STILL_WORKS, copy_thunder, installed_base, last_json, run_python
from thunder_overlay import manifest

SWITCH = "THUNDER_OVERLAY_BASE"


def a_context_line_of_a_hunk(text: str) -> str:
    """A context line of the first jit_ext.py hunk of the series, one that occurs once in ``text``."""
    series = installed_base().directory
    first = next(n for n in (series / "series").read_text().split() if n.endswith(".patch"))
    diff = (series / first).read_text()
    diff = diff[diff.index("+++ b/thunder/core/jit_ext.py"):]
    hunk = diff[diff.index("\n@@"):]
    return next(
        line[1:] for line in hunk.splitlines()
        if line.startswith(" ") and len(line.strip()) > 20 and text.splitlines().count(line[1:]) == 1
    )


@pytest.fixture(scope="module")
def shifted_tree(tmp_path_factory) -> Path:
    """A source tree whose jit_ext.py has 40 comment lines on top: no known base, every hunk at +40."""
    tree = copy_thunder(tmp_path_factory.mktemp("shifted"), dist_info=False)
    jit_ext = tree / "thunder" / "core" / "jit_ext.py"
    jit_ext.write_text("# a line that upstream added later\n" * 40 + jit_ext.read_text())
    return tree


@pytest.fixture(scope="module")
def drifted_tree(tmp_path_factory) -> Path:
    """A source tree whose jit_ext.py changed a line the first hunk needs as context."""
    tree = copy_thunder(tmp_path_factory.mktemp("drifted"), dist_info=False)
    jit_ext = tree / "thunder" / "core" / "jit_ext.py"
    text = jit_ext.read_text()
    context = a_context_line_of_a_hunk(text)
    jit_ext.write_text(text.replace(context + "\n", context + "  # changed upstream\n", 1))
    return tree


def sha256_of(tree: Path) -> str:
    return hashlib.sha256((tree / "thunder" / "core" / "jit_ext.py").read_bytes()).hexdigest()


@pytest.mark.slow
def test_unknown_file_is_refused_without_the_switch(shifted_tree):
    out = last_json(run_python(IMPORT_AND_STATUS, env={"PYTHONPATH": str(shifted_tree)}))
    status = out["status"]
    assert not out["patched"] and status["state"] == "refused" and not status["known"]
    assert [f["sha256"] for f in status["files"] if f["module"] == "thunder.core.jit_ext"] == [sha256_of(shifted_tree)]
    assert f"has sha256 {sha256_of(shifted_tree)}, which is no known base" in status["reason"]
    assert f"{SWITCH}=<series> applies a series when every hunk applies with exact context" in status["reason"]


@pytest.mark.slow
def test_switch_patches_an_unknown_file_when_every_hunk_applies_exactly(shifted_tree):
    base = installed_base().name
    proc = run_python(
        IMPORT_AND_STATUS,
        # the patched code runs: the autocast chain that crashes stock thunder (upstream #283) passes
        "from thunder_overlay.reproducers import load; print('chain:', load('autocast_chain').run())",
        env={"PYTHONPATH": str(shifted_tree), SWITCH: base},
    )
    out = last_json(proc)
    status = out["status"]
    assert out["patched"] and out["file"].startswith(str(shifted_tree))
    assert status["state"] == "patched-unverified" and not status["known"] and status["reason"] is None
    (jit_ext,) = [f for f in status["files"] if f["module"] == "thunder.core.jit_ext"]
    assert jit_ext["sha256"] == sha256_of(shifted_tree) and not jit_ext["matches_base"] and jit_ext["patched"]
    assert status["base"] == base
    assert status["base_switch"] == base and status["patches"]
    assert "chain: " in proc.stdout


def test_switch_refuses_when_a_hunk_does_not_apply_exactly(drifted_tree):
    base = installed_base().name
    env = {"PYTHONPATH": str(drifted_tree), SWITCH: base}
    proc = run_python(IMPORT_AND_STATUS, JIT_STILL_WORKS, env=env)
    out = last_json(proc)
    reason = out["status"]["reason"]
    assert not out["patched"] and out["status"]["state"] == "refused" and "jit works" in proc.stdout
    assert reason.startswith(
        f"{SWITCH}={base}: the {base} series does not apply with exact context to "
        f"{drifted_tree / 'thunder' / 'core' / 'jit_ext.py'} (sha256 {sha256_of(drifted_tree)}): "
    )
    assert re.search(r"\.patch: hunk #\d+ does not apply at line \d+: expected .*, found .*# changed upstream", reason)
    assert "thunder-overlay: not patching thunder, stock thunder runs. " + reason in proc.stderr

    strict = run_python("import thunder", env=env, overlay="strict")
    last = strict.stderr.strip().splitlines()[-1]
    assert strict.returncode != 0 and last.startswith("ImportError: thunder-overlay: importing thunder fails")
    assert "does not apply with exact context" in last


@pytest.mark.slow
def test_switch_naming_no_series_is_refused_with_the_valid_names(shifted_tree):
    out = last_json(run_python(IMPORT_AND_STATUS, env={"PYTHONPATH": str(shifted_tree), SWITCH: "9.9"}))
    reason = out["status"]["reason"]
    assert not out["patched"] and out["status"]["state"] == "refused"
    assert reason.startswith(f"{SWITCH}='9.9' names no patch series; valid names: ")
    for base in manifest.load():
        assert base.name in reason.split("valid names: ")[1]


NAMES_PROGRAM = """
import torch
def f(x):
    hidden = torch.tanh(x)
    return hidden * 2
def f_inputs():
    return (torch.randn(2, 2),)
"""


@pytest.mark.slow
def test_names_runs_on_an_unverified_base_and_refuses_at_once_without_it(shifted_tree, tmp_path):
    program = tmp_path / "program.py"
    program.write_text(NAMES_PROGRAM)
    names = f"import sys; from thunder_overlay import cli; sys.exit(cli.main(['names', {str(program) + ':f'!r}]))"
    env = {"PYTHONPATH": str(shifted_tree)}
    refused = run_python(names, env=env, timeout=120)
    assert refused.returncode == 2, refused.stdout + refused.stderr
    assert "the overlay side would not run patched (state refused)" in refused.stderr
    assert "names:" not in refused.stdout  # refused before any program was traced
    unverified = run_python(names, env=dict(env, **{SWITCH: installed_base().name}), timeout=600)
    assert unverified.returncode == 0, unverified.stdout + unverified.stderr
    assert "note: the overlay side ran patched-unverified" in unverified.stdout
    assert "0 lost" in unverified.stdout
