"""The bytecode cache of the patched thunder: a warm entry is used (no patch is parsed or applied), also
under PYTHONDONTWRITEBYTECODE; a corrupt, mismatched or foreign entry is ignored and rewritten; a read-only
or uncreatable folder and THUNDER_OVERLAY_CACHE=0 leave the overlay patching from the series. Real thunder,
fresh processes."""

import os
import shutil
import stat
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from conftest import PATCHED_SUFFIX, copy_thunder, last_json, run_python

CACHE_ENV = "THUNDER_OVERLAY_CACHE_DIR"

# Import thunder; print the status, whether the patch engine (patchset) was imported, and a digest of the
# source the module reports (linecache and inspect keep working from the cache).
IMPORT = """
import hashlib, inspect, json, sys
import thunder, thunder.core.jit_ext as je, thunder_overlay
print(json.dumps({"status": thunder_overlay.status(), "file": je.__file__,
                  "code_file": je.thunder_general_jit.__code__.co_filename,
                  "engine_imported": "thunder_overlay.patchset" in sys.modules,
                  "source": hashlib.sha256(inspect.getsource(je.thunder_general_jit).encode()).hexdigest()}))
"""


def run(cache: Path, env: dict | None = None, **kwargs) -> dict:
    proc = run_python(IMPORT, env={CACHE_ENV: str(cache), **(env or {})}, **kwargs)
    out = last_json(proc)
    assert out["status"]["state"] == "patched", out["status"]
    assert out["code_file"] == out["file"] + PATCHED_SUFFIX
    return out


def entries(cache: Path) -> list[Path]:
    return sorted(p for p in cache.iterdir() if p.suffix == ".bin") if cache.is_dir() else []


def warm(cache: Path, env: dict | None = None) -> tuple[dict, Path]:
    cold = run(cache, env)
    (entry,) = entries(cache)
    assert cold["status"]["bytecode_cache"] == f"written: {entry}" and cold["engine_imported"]
    return cold, entry


def test_warm_cache_is_used_without_parsing_or_applying_a_patch(tmp_path):
    cold, entry = warm(tmp_path)
    hot = run(tmp_path)
    assert hot["status"]["bytecode_cache"] == f"hit: {entry}"
    assert not hot["engine_imported"], "with a warm cache the patch engine is never imported"
    assert hot["source"] == cold["source"] and hot["status"]["patches"] == cold["status"]["patches"]
    assert {k: v for k, v in hot["status"].items() if k != "bytecode_cache"} == {
        k: v for k, v in cold["status"].items() if k != "bytecode_cache"
    }


@pytest.mark.slow
@pytest.mark.parametrize("damage", ["truncated", "garbage", "empty"])
def test_corrupt_entry_is_ignored_and_rewritten(tmp_path, damage):
    _, entry = warm(tmp_path)
    data = entry.read_bytes()
    entry.write_bytes({"truncated": data[: len(data) // 2], "garbage": os.urandom(4096), "empty": b""}[damage])
    again = run(tmp_path)
    assert again["status"]["bytecode_cache"].startswith(f"written: {entry} (replaced an entry that was not used: ")
    assert "ValueError" in again["status"]["bytecode_cache"] and again["engine_imported"]
    assert run(tmp_path)["status"]["bytecode_cache"] == f"hit: {entry}"


@pytest.mark.slow
def test_entry_of_changed_patches_is_ignored_and_rewritten(tmp_path, patches_copy):
    env = {"THUNDER_OVERLAY_PATCHES": str(patches_copy)}
    first = run(tmp_path, env)
    (entry,) = entries(tmp_path)
    series_dir = Path(first["status"]["series_dir"])
    patch = series_dir / first["status"]["patches"][0]
    patch.write_text(patch.read_text().replace("\nBug: ", "\nNote: the description changed\nBug: ", 1))
    changed = run(tmp_path, env)
    assert changed["status"]["bytecode_cache"] == (
        f"written: {entry} (replaced an entry that was not used: its key differs in series)"
    )
    assert run(tmp_path, env)["status"]["bytecode_cache"] == f"hit: {entry}"


@pytest.mark.slow
def test_entry_is_trusted_by_its_key_not_by_its_name(tmp_path):
    # The entry made for the installed thunder, put where a thunder tree elsewhere looks for its own.
    _, installed_entry = warm(tmp_path / "cache")
    tree = copy_thunder(tmp_path / "tree", dist_info=False)
    env = {"PYTHONPATH": str(tree)}
    own = run(tmp_path / "cache", env)
    own_entry = Path(own["status"]["bytecode_cache"].removeprefix("written: "))
    assert own_entry != installed_entry and own_entry.parent == tmp_path / "cache"
    shutil.copyfile(installed_entry, own_entry)
    moved = run(tmp_path / "cache", env)
    assert moved["status"]["bytecode_cache"] == (
        f"written: {own_entry} (replaced an entry that was not used: its key differs in files, thunder)"
    )
    assert moved["file"].startswith(str(tree))


def _drop_permission_override():
    """Root writes into any folder; a child of root without CAP_DAC_OVERRIDE / CAP_DAC_READ_SEARCH / CAP_FOWNER
    (dropped from its bounding set, so the exec'd interpreter never gets them) obeys the folder's mode and its
    sticky bit."""
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    for capability in (1, 2, 3):  # CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH, CAP_FOWNER
        if libc.prctl(24, capability, 0, 0, 0) != 0:  # PR_CAPBSET_DROP
            raise OSError(ctypes.get_errno(), "prctl(PR_CAPBSET_DROP)")


def _obeying_folder_modes(folder: Path) -> dict:
    """Keyword arguments for run_python under which ``folder`` (mode 0o555) is read-only, or a skip."""
    popen = {"preexec_fn": _drop_permission_override} if os.geteuid() == 0 else {}
    try:
        probe = subprocess.run([sys.executable, "-c", "import sys; open(sys.argv[1] + '/probe', 'w')", str(folder)],
                               capture_output=True, **popen)
    except (OSError, subprocess.SubprocessError) as e:
        pytest.skip(f"cannot start a process that obeys folder permissions here: {e}")
    if probe.returncode == 0:
        pytest.skip("this process can write into a mode 0o555 folder (root without a droppable capability)")
    return popen


@pytest.mark.slow
@pytest.mark.slow
@pytest.mark.skipif(not hasattr(os, "geteuid"), reason="POSIX permissions")
def test_read_only_cache_folder_is_read_and_never_written(tmp_path):
    empty, filled = tmp_path / "empty", tmp_path / "filled"
    empty.mkdir()
    warm(filled)
    (entry,) = entries(filled)
    read_only = stat.S_IRUSR | stat.S_IXUSR | stat.S_IRGRP | stat.S_IXGRP | stat.S_IROTH | stat.S_IXOTH
    for folder in (empty, filled):
        os.chmod(folder, read_only)
    try:
        popen = _obeying_folder_modes(empty)
        cold = run(empty, **popen)
        assert cold["status"]["bytecode_cache"].startswith("not written (PermissionError: ")
        assert entries(empty) == []
        assert run(filled, **popen)["status"]["bytecode_cache"] == f"hit: {entry}"
    finally:
        for folder in (empty, filled):
            os.chmod(folder, 0o700)


@pytest.mark.slow
def test_cache_folder_that_cannot_be_created_is_ignored(tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    out = run(blocker / "cache")
    assert out["status"]["bytecode_cache"].startswith("not written (NotADirectoryError: ")


@pytest.mark.parametrize("flag", [{"PYTHONDONTWRITEBYTECODE": "1"},
                                  pytest.param({"PYTHONDONTWRITEBYTECODE": ""}, marks=pytest.mark.slow)])
def test_pythondontwritebytecode_governs_pyc_beside_sources_not_the_cache(tmp_path, flag):
    # The cache lives in the user's cache folder, outside any source tree: written and used either way.
    cold, entry = warm(tmp_path, flag)
    assert run(tmp_path, flag)["status"]["bytecode_cache"] == f"hit: {entry}"


@pytest.mark.slow
def test_python_dash_b_leaves_the_cache_in_use(tmp_path):
    _, entry = warm(tmp_path)
    assert run(tmp_path, args=("-B",))["status"]["bytecode_cache"] == f"hit: {entry}"


@pytest.mark.slow
@pytest.mark.parametrize("value", ["0", "off", "NO"])
def test_cache_switched_off_is_neither_read_nor_written(tmp_path, value):
    _, entry = warm(tmp_path)
    before = entry.read_bytes()
    off = run(tmp_path, {"THUNDER_OVERLAY_CACHE": value})
    assert off["status"]["bytecode_cache"] == f"off (THUNDER_OVERLAY_CACHE={value})" and off["engine_imported"]
    assert entries(tmp_path) == [entry] and entry.read_bytes() == before


@pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() != 0, reason="needs root to give the entry away")
@pytest.mark.slow
def test_entry_another_user_owns_is_never_used(tmp_path):
    _, entry = warm(tmp_path)
    os.chown(entry, 54321, 54321)  # as if another user had written it into this folder
    again = run(tmp_path)
    assert again["status"]["bytecode_cache"] == (
        f"written: {entry} (replaced an entry that was not used: ValueError: the entry belongs to another user)"
    )
    assert again["engine_imported"] and entry.stat().st_uid == os.geteuid()


@pytest.mark.slow
def test_default_folder_follows_xdg_cache_home(tmp_path):
    proc = run_python(IMPORT, env={"XDG_CACHE_HOME": str(tmp_path)}, unset=(CACHE_ENV,))
    out = last_json(proc)
    (entry,) = entries(tmp_path / "thunder-overlay")
    assert out["status"]["bytecode_cache"] == f"written: {entry}"


def _unknown_uid() -> int:
    import pwd

    for uid in range(54321, 60000):
        try:
            pwd.getpwuid(uid)
        except KeyError:
            return uid
    pytest.skip("no free uid without a passwd entry")


def _reachable_for_others_script() -> tuple[str, list[str]]:
    """Shell lines for a mount namespace in which every folder this interpreter needs (its executable, its
    prefixes, sys.path: a venv, an editable checkout) is reachable for another uid: a tmpfs over each
    topmost folder that others cannot enter (/root, say), with the needed entries under it bound back.
    Returns the lines and the temporary folders that hold the originals meanwhile."""
    needed = {Path(os.path.realpath(p)) for p in (sys.executable, sys.prefix, sys.base_prefix, *sys.path)
              if p and os.path.exists(p)}
    hidden: dict[Path, set[Path]] = {}
    for path in needed:
        closed = next((a for a in reversed([path, *path.parents]) if not os.stat(a).st_mode & stat.S_IXOTH), None)
        if closed is not None and closed != path:
            hidden.setdefault(closed, set()).add(closed / path.relative_to(closed).parts[0])
    lines, keeps = [], []
    for closed, children in hidden.items():
        saved = []
        for child in sorted(children):
            keep = tempfile.mkdtemp(prefix="thunder-overlay-keep-")
            if not child.is_dir():
                keep = os.path.join(keep, "file")
                open(keep, "w").close()
            keeps.append(keep)
            saved.append((child, keep))
            lines.append(f"mount --bind '{child}' '{keep}'")
        lines.append(f"mount -t tmpfs -o mode=755 none '{closed}'")
        for child, keep in saved:
            lines.append(f"{'mkdir' if os.path.isdir(keep) else 'touch'} '{child}' && mount --bind '{keep}' '{child}'")
    return "\n".join(lines), keeps


def _as_unknown_uid_without_home(code: str) -> subprocess.CompletedProcess:
    """Run ``code`` with this environment's interpreter as a uid that has no passwd entry and no HOME, as in
    a container started with an arbitrary uid. Needs root, unshare and setpriv (folders only root may enter
    are made reachable inside a mount namespace; the machine is unchanged)."""
    if not hasattr(os, "geteuid") or os.geteuid() != 0 or not (shutil.which("unshare") and shutil.which("setpriv")):
        pytest.skip("needs root, unshare and setpriv to run a child as a uid without a passwd entry")
    mounts, keeps = _reachable_for_others_script()
    uid = _unknown_uid()
    env = {k: v for k, v in os.environ.items() if k not in (CACHE_ENV, "XDG_CACHE_HOME", "HOME")}
    script = f'set -e\n{mounts}\ncd / && exec setpriv --reuid {uid} --regid {uid} --clear-groups "$0" -c "$1"\n'
    try:
        proc = subprocess.run(["unshare", "-m", "sh", "-c", script, sys.executable, code], env=env,
                              capture_output=True, text=True, timeout=600)
    finally:
        for keep in keeps:  # empty again: the bind mounts ended with the namespace
            shutil.rmtree(keep if os.path.isdir(keep) else os.path.dirname(keep))
    if proc.returncode != 0 and "Traceback" not in proc.stderr:
        pytest.skip(f"cannot make a mount namespace here: {proc.stderr.strip()[-300:]}")
    if proc.returncode != 0 and "PermissionError" in proc.stderr:
        pytest.skip(f"this environment is not readable by another uid: {proc.stderr.strip()[-300:]}")
    return proc


@pytest.mark.slow
def test_without_a_home_directory_the_cache_is_off():
    proc = _as_unknown_uid_without_home(
        "import json, os, pathlib\n"
        "try:\n    pathlib.Path.home(); print('has a home')\nexcept RuntimeError: pass\n" + IMPORT
    )
    out = last_json(proc)
    assert "has a home" not in proc.stdout, "the child must have no home directory"
    assert out["status"]["state"] == "patched", out["status"]
    assert out["status"]["bytecode_cache"] == "off (no cache folder: set THUNDER_OVERLAY_CACHE_DIR, XDG_CACHE_HOME or HOME)"
    assert "thunder-overlay" not in proc.stderr


@pytest.mark.slow
def test_a_temporary_file_left_by_a_killed_writer_blocks_no_later_writer(tmp_path):
    _, entry = warm(tmp_path)
    entry.unlink()
    # What a writer killed mid-write left behind, under the pid this process has now (containers reuse pids).
    leave_stale = f"import os; open(os.path.join({str(tmp_path)!r}, {entry.name!r} + f'.{{os.getpid()}}.tmp'), 'w')"
    proc = run_python(leave_stale, IMPORT, env={CACHE_ENV: str(tmp_path)})
    out = last_json(proc)
    assert out["status"]["bytecode_cache"] == f"written: {entry}"
    assert run(tmp_path)["status"]["bytecode_cache"] == f"hit: {entry}"
    left = [p.name for p in tmp_path.iterdir() if p.suffix == ".tmp"]
    assert len(left) == 1 and left[0].startswith(f"{entry.name}."), "the writers leave no temporary file of their own"


@pytest.mark.slow
def test_every_module_that_shapes_the_patched_code_is_in_the_cache_key(tmp_path):
    from thunder_overlay import bytecode_cache

    proc = run_python(
        "import json, sys, thunder",
        "print(json.dumps(sorted(m for m in sys.modules if m.startswith('thunder_overlay.'))))",
        env={CACHE_ENV: str(tmp_path)},
    )
    loaded = {m.removeprefix("thunder_overlay.") + ".py" for m in last_json(proc)}
    assert "patchset.py" in loaded, "a cold import applies the series"
    assert loaded <= set(bytecode_cache.ENGINE_FILES), sorted(loaded - set(bytecode_cache.ENGINE_FILES))


@pytest.mark.slow
@pytest.mark.parametrize("module", ["manifest.py", "_startup.py", "config.py"])
def test_an_edited_engine_module_invalidates_the_entry(tmp_path, module):
    overlay = tmp_path / "overlay"
    shutil.copytree(Path(__file__).resolve().parents[1] / "overlay" / "thunder_overlay", overlay / "thunder_overlay",
                    ignore=shutil.ignore_patterns("__pycache__"))
    cache = tmp_path / "cache"
    env = {"PYTHONPATH": str(overlay)}
    run(cache, env)
    (entry,) = entries(cache)
    assert run(cache, env)["status"]["bytecode_cache"] == f"hit: {entry}"
    edited = overlay / "thunder_overlay" / module
    edited.write_text(edited.read_text() + "\n# edited\n")
    again = run(cache, env)["status"]["bytecode_cache"]
    assert again == f"written: {entry} (replaced an entry that was not used: its key differs in engine)", again
