"""Bad input never leaves a half-patched thunder: one clear message, stock thunder keeps working, and
THUNDER_OVERLAY=strict turns the refusal into an ImportError. All cases use real files."""

import json
from pathlib import Path

import pytest

from conftest import (
    JIT_STILL_WORKS, REPO, WARNINGS_AS_ERRORS, assert_strict_raises, copy_thunder, installed_base, installed_form, refused,
    run_python, run_refusal,
)

@pytest.fixture(scope="module")
def thunder_copy_edited(tmp_path_factory) -> Path:
    """A copy of thunder (with its dist-info) whose jit_ext.py is edited in place: no known base."""
    thunder_copy = copy_thunder(tmp_path_factory.mktemp("thunder-edited"))
    jit_ext = thunder_copy / "thunder" / "core" / "jit_ext.py"
    lines = jit_ext.read_text().splitlines(keepends=True)
    lines[1] = lines[1].rstrip("\n") + "  # edited locally\n"
    jit_ext.write_text("".join(lines))
    return thunder_copy


def test_locally_edited_jit_ext_is_refused(thunder_copy_edited):
    thunder_copy = thunder_copy_edited
    jit_ext = thunder_copy / "thunder" / "core" / "jit_ext.py"
    env = {"PYTHONPATH": str(thunder_copy)}
    out = refused(run_refusal(env))
    reason = out["status"]["reason"]
    assert str(jit_ext) in reason and "THUNDER_OVERLAY_BASE=" in reason
    # only a release's metadata tells a local edit from an unknown file; a source tree (main from git) has none
    wheel = installed_form() == "wheel ("
    told = f"thunder {out['status']['thunder_version']}, wheel (" if wheel else "source tree ("
    assert told in reason and (not wheel or "edited locally" in reason)
    assert out["status"]["thunder_path"] == str(thunder_copy / "thunder")
    assert_strict_raises(env, "edited locally" if wheel else "THUNDER_OVERLAY_BASE=")


@pytest.mark.slow
def test_pytest_filterwarnings_error_never_fails_a_test_on_a_refusal(thunder_copy_edited, tmp_path):
    # A project whose pytest configuration turns warnings into errors, allowing the two that importing
    # stock thunder gives (transformer_engine missing; a file interpreter.py leaves open).
    (tmp_path / "pytest.ini").write_text(
        "[pytest]\nfilterwarnings =\n    error\n    ignore:transformer_engine module not found:UserWarning\n"
        "    ignore::ResourceWarning\n    ignore::pytest.PytestUnraisableExceptionWarning\n"
    )
    (tmp_path / "test_uses_thunder.py").write_text(
        "def test_import():\n    import thunder.core.jit_ext as je\n    assert type(je.__loader__).__name__ == 'SourceFileLoader'\n"
    )
    test_file = str(tmp_path / "test_uses_thunder.py")
    code = f"import sys, pytest; sys.exit(pytest.main(['-q', '-p', 'no:cacheprovider', {test_file!r}]))"
    env = {"PYTHONPATH": str(thunder_copy_edited)}
    for overlay in ("0", "1"):  # stock passes under this configuration; so does a refusal
        proc = run_python(code, env=env, cwd=tmp_path, overlay=overlay)
        assert proc.returncode == 0 and "1 passed" in proc.stdout, proc.stdout[-3000:] + proc.stderr[-3000:]


@pytest.mark.slow
def test_file_that_is_no_known_base_is_refused(patches_copy):
    # A manifest without the installed file's sha256: what an overlay that predates this thunder sees.
    import hashlib
    import importlib.util

    jit_ext = Path(importlib.util.find_spec("thunder").origin).parent / "core" / "jit_ext.py"
    sha = hashlib.sha256(jit_ext.read_bytes()).hexdigest()
    manifest = patches_copy / "manifest.toml"
    manifest.write_text(manifest.read_text().replace(sha, "0" * 64))
    env = {"THUNDER_OVERLAY_PATCHES": str(patches_copy)}
    out = refused(run_refusal(env))
    reason = out["status"]["reason"]
    assert f"has sha256 {sha}, which is no known base (supported releases: 0.2.1, " in reason
    # what to do comes first: pin a supported release or upgrade the overlay
    assert reason.startswith("thunder-overlay ") and reason.index(
        ": pin a supported release (pip install lightning-thunder==0.2.6) or upgrade thunder-overlay. ") < 80, reason
    assert out["status"]["patches_override"] is True and out["status"]["patches_dir"] == str(patches_copy)
    assert_strict_raises(env, "which is no known base")


@pytest.mark.slow
def test_warnings_as_errors_never_turn_a_refusal_into_an_import_error(thunder_copy_edited):
    env = {"PYTHONPATH": str(thunder_copy_edited)}
    code = "import thunder, thunder.core.jit_ext as je; print('imported', je.__file__, type(je.__loader__).__name__)"
    stock = run_python(code, env=env, overlay="0", args=WARNINGS_AS_ERRORS)
    assert stock.returncode == 0, "stock thunder imports under these flags: " + stock.stderr[-2000:]
    proc = run_python(code, env=env, args=WARNINGS_AS_ERRORS)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert f"imported {thunder_copy_edited / 'thunder' / 'core' / 'jit_ext.py'} SourceFileLoader\n" in proc.stdout
    printed = [line for line in proc.stderr.splitlines() if "thunder-overlay: not patching" in line]
    assert len(printed) == 1 and printed[0].startswith("thunder-overlay: not patching thunder, stock thunder runs.")
    assert printed[0].endswith("[printed, not raised: warnings are errors in this process]")
    # No warning object and no traceback through the overlay's code (thunder's own ResourceWarning in a
    # destructor may print one, "Exception ignored", under -W error, stock as well).
    import thunder_overlay

    engine = str(Path(thunder_overlay.__file__).parent)
    assert "OverlayWarning" not in proc.stderr and f'File "{engine}' not in proc.stderr


def _series_patch(patches_copy: Path) -> Path:
    base = installed_base(patches_copy)
    first = next(n for n in (base.directory / "series").read_text().splitlines() if n and not n.startswith("#"))
    return base.directory / first


def test_patch_that_does_not_apply_is_refused(patches_copy):
    patch = _series_patch(patches_copy)
    text = patch.read_text()
    diff = text[text.index("\n@@"):]
    context = next(line for line in diff.splitlines() if line.startswith(" ") and len(line) > 20)
    patch.write_text(text.replace(context, context + " # drifted", 1))
    env = {"THUNDER_OVERLAY_PATCHES": str(patches_copy)}
    out = refused(run_refusal(env))
    reason = out["status"]["reason"]
    assert "PatchApplyError" in reason and patch.name in reason and "hunk #" in reason and "# drifted" in reason
    assert_strict_raises(env, "does not apply")


@pytest.mark.parametrize("damage", ["truncate", pytest.param("corrupt", marks=pytest.mark.slow),
                                    pytest.param("empty", marks=pytest.mark.slow)])
@pytest.mark.slow
def test_corrupt_or_truncated_patch_is_refused(patches_copy, damage):
    patch = _series_patch(patches_copy)
    text = patch.read_text()
    if damage == "truncate":
        text = text[: len(text) * 2 // 3]
    elif damage == "corrupt":
        lines = text.splitlines(keepends=True)
        first_hunk = next(i for i, line in enumerate(lines) if line.startswith("@@"))
        lines[first_hunk + 2] = "?" + lines[first_hunk + 2][1:]
        text = "".join(lines)
    else:
        text = ""
    patch.write_text(text)
    out = refused(run_refusal({"THUNDER_OVERLAY_PATCHES": str(patches_copy)}))
    assert "PatchError" in out["status"]["reason"] and patch.name in out["status"]["reason"]


def test_thunder_imported_before_the_finder_stays_stock():
    proc = run_python(
        """
        import os, sys, json, warnings
        import thunder
        os.environ["THUNDER_OVERLAY"] = "1"
        import thunder_overlay
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            status = thunder_overlay.enable()
        print(json.dumps({"messages": [str(w.message) for w in caught], "status": status}))
        """,
        JIT_STILL_WORKS,
        overlay="0",
    )
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout.splitlines()[0])
    assert len(out["messages"]) == 1 and "imported before the overlay was enabled" in out["messages"][0]
    assert "thunder.core." in out["messages"][0] and "thunder stays stock" in out["messages"][0]
    assert out["status"]["state"] == "stock-imported"
    assert "jit works" in proc.stdout


def test_thunder_not_installed_is_reported():
    # -S skips site-packages: no thunder, no torch, and no start-up hook; enable() installs the finder.
    proc = run_python(
        "import json, thunder_overlay; print(json.dumps(thunder_overlay.enable()))",
        args=("-S",),
        env={"PYTHONPATH": str(REPO / "overlay")},
        inherit_pythonpath=False,
    )
    assert proc.returncode == 0, proc.stderr
    status = json.loads(proc.stdout)
    assert status["state"] == "not-installed"
    assert status["reason"] == "thunder is not installed (no importable 'thunder' package)"
