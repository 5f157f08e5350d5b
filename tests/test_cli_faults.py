"""Every command ends with a clear message and a documented exit code, whatever it meets (issue 45): a cache
folder holding what no entry should be, a thunder under a path that is not UTF-8, a file edited behind the
cache's back, programs that exit, print the old protocol marker or run too long, unreadable targets, a reader
that goes away; and the cache's settings warn once when they name nothing the overlay knows. Real thunder,
fresh processes; no traceback anywhere."""

import json
import os
import subprocess
import sys

import pytest

from conftest import copy_thunder, installed_site, last_json, run_python
from test_bytecode_cache import IMPORT, _obeying_folder_modes

CLI = [sys.executable, "-m", "thunder_overlay.cli"]
CACHE_ENV = "THUNDER_OVERLAY_CACHE_DIR"


def cli(*args: str, env: dict | None = None, unset=(), **popen) -> subprocess.CompletedProcess:
    env = dict(env or {})
    if "PYTHONPATH" in env and os.environ.get("PYTHONPATH"):  # keep the version matrix's release (as run_python)
        env["PYTHONPATH"] += os.pathsep + os.environ["PYTHONPATH"]
    full_env = dict(os.environ, PYTHONWARNINGS="default", **env)
    for name in unset:
        full_env.pop(name, None)
    proc = subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=600, env=full_env, **popen)
    assert "Traceback" not in proc.stderr, proc.stderr[-3000:]
    return proc


def series_of(patches_copy) -> dict:
    """The environment that reads the series from a copy of patches/: a test that expects a cache hit must not
    miss because patches/ was edited meanwhile."""
    return {"THUNDER_OVERLAY_PATCHES": str(patches_copy)}


def entry_name(folder) -> str:
    from thunder_overlay import bytecode_cache

    return bytecode_cache._path_in(str(folder), str(installed_site() / "thunder")).name


@pytest.fixture
def read_only_probe(tmp_path):
    """A folder _obeying_folder_modes probes (mode 0o555)."""
    probe = tmp_path / "probe-folder"
    probe.mkdir()
    os.chmod(probe, 0o555)
    yield probe
    os.chmod(probe, 0o700)


# --- 1. cache --clear clears what it may, says what it left and why, touches nothing outside the folder


def test_clear_removes_entries_and_links_leaves_a_full_folder_and_touches_nothing_outside(tmp_path):
    cache, outside = tmp_path / "cache", tmp_path / "outside"
    cache.mkdir()
    outside.mkdir()
    (outside / "keep.bin").write_text("not the cache's")
    (cache / "thunder-a.bin").write_text("garbage")
    (cache / "thunder-b.tmp").write_text("left by a killed writer")
    (cache / "thunder-empty.bin").mkdir()
    (cache / "thunder-full.bin").mkdir()
    (cache / "thunder-full.bin" / "mine").write_text("kept")
    (cache / "thunder-link.bin").symlink_to(outside / "keep.bin")
    (cache / "thunder-linked-folder.bin").symlink_to(outside)
    (cache / "other").write_text("no entry's name")
    proc = cli("cache", "--clear", "--all", env={CACHE_ENV: str(cache)})
    assert proc.returncode == 1, (proc.stdout, proc.stderr)
    assert "removed 5 file(s)" in proc.stdout
    assert f"left 1:\n  {cache / 'thunder-full.bin'}: a folder, not an entry, and not empty" in proc.stderr
    assert sorted(p.name for p in cache.iterdir()) == ["other", "thunder-full.bin"]
    assert (cache / "thunder-full.bin" / "mine").read_text() == "kept"
    assert (outside / "keep.bin").read_text() == "not the cache's" and sorted(os.listdir(outside)) == ["keep.bin"]
    again = cli("cache", "--clear", "--all", env={CACHE_ENV: str(cache)})
    assert again.returncode == 1 and "removed 0 file(s)" in again.stdout and "not empty" in again.stderr


@pytest.mark.skipif(not hasattr(os, "geteuid"), reason="POSIX permissions")
def test_clear_in_a_read_only_folder_says_what_it_left(tmp_path):
    cache = tmp_path / "cache"
    cache.mkdir()
    (cache / "thunder-a.bin").write_text("garbage")
    os.chmod(cache, 0o555)
    try:
        proc = cli("cache", "--clear", "--all", env={CACHE_ENV: str(cache)}, **_obeying_folder_modes(cache))
    finally:
        os.chmod(cache, 0o700)
    assert proc.returncode == 1 and "removed 0 file(s)" in proc.stdout
    assert f"{cache / 'thunder-a.bin'}: the cache folder does not let you remove it: Permission denied" in proc.stderr
    assert (cache / "thunder-a.bin").exists()


@pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() != 0, reason="needs root to give files away")
def test_clear_leaves_another_users_entry_in_a_shared_sticky_folder(tmp_path, read_only_probe):
    shared = tmp_path / "shared"
    shared.mkdir()
    (shared / "thunder-theirs.bin").write_text("another user's entry")
    (shared / "thunder-mine.bin").write_text("garbage")
    os.chown(shared / "thunder-theirs.bin", 54322, 54322)
    os.chown(shared, 54321, 54321)
    os.chmod(shared, 0o1777)
    proc = cli("cache", "--clear", "--all", env={CACHE_ENV: str(shared)}, **_obeying_folder_modes(read_only_probe))
    assert proc.returncode == 1, (proc.stdout, proc.stderr)
    assert f"removed 1 file(s)\n  {shared / 'thunder-mine.bin'}" in proc.stdout
    assert f"{shared / 'thunder-theirs.bin'}: it belongs to another user (uid 54322)" in proc.stderr
    assert sorted(os.listdir(shared)) == ["thunder-theirs.bin"]


def test_clear_removes_only_the_entries_of_this_environments_thunder_unless_all(tmp_path):
    # The folder is shared by every environment of the user: another environment's thunder keeps its entry
    other = tmp_path / "other-env"
    other.mkdir()
    (other / "thunder").symlink_to(installed_site() / "thunder")
    cache = tmp_path / "cache"
    env = {CACHE_ENV: str(cache)}
    assert run_python("import thunder", env=env).returncode == 0
    assert run_python("import thunder", env={**env, "PYTHONPATH": str(other)}).returncode == 0
    (cache / "thunder-left.tmp").write_text("a killed writer's, of no known thunder")
    entries = {e["thunder"]: e["path"] for e in json.loads(cli("cache", "--json", env=env).stdout)["entries"]}
    mine, theirs = str(installed_site() / "thunder"), str(other / "thunder")
    assert set(entries) == {mine, theirs, None}, entries

    cleared = cli("cache", "--clear", env=env)
    assert cleared.returncode == 0, cleared.stderr
    assert f"removed 1 file(s) of the thunder at {mine}\n  {entries[mine]}" in cleared.stdout
    assert sorted(str(p) for p in cache.iterdir()) == sorted([entries[theirs], entries[None]])

    assert cli("cache", "--all", env=env).returncode == 2, "--all goes with --clear"
    everything = cli("cache", "--clear", "--all", env=env)
    assert everything.returncode == 0 and "removed 2 file(s)\n" in everything.stdout and list(cache.iterdir()) == []


# --- 2. a thunder under a path that is not valid UTF-8 patches with the cache on, as with it off


def test_thunder_under_a_path_that_is_not_utf8_is_patched_with_the_cache_on(tmp_path, patches_copy):
    site = tmp_path / os.fsdecode(b"site-\xff")
    site.mkdir()
    (site / "thunder").symlink_to(installed_site() / "thunder")
    env = {"PYTHONPATH": str(site), CACHE_ENV: str(tmp_path / "cache"), **series_of(patches_copy)}
    cold = last_json(run_python(IMPORT, env=env))["status"]
    assert cold["state"] == "patched", cold["reason"]
    assert cold["thunder_path"] == str(site / "thunder") and cold["bytecode_cache"].startswith("written: ")
    hot = last_json(run_python(IMPORT, env=env))["status"]
    assert hot["state"] == "patched" and hot["bytecode_cache"].startswith("hit: ")
    printed = cli("status", env=env)
    assert printed.returncode == 0 and "thunder-overlay: patched" in printed.stdout
    assert "site-\\udcff" in printed.stdout, "the path prints escaped"


# --- 3. a file edited with its size and modification time put back: status says what it trusted; --verify


@pytest.mark.slow
def test_status_says_the_cache_trusted_the_stamps_and_verify_finds_the_edit(tmp_path, patches_copy):
    tree = copy_thunder(tmp_path / "site", dist_info=False)
    env = {"PYTHONPATH": str(tree), CACHE_ENV: str(tmp_path / "cache"), **series_of(patches_copy)}
    assert cli("status", env=env).returncode == 0  # writes the entry
    hit = cli("status", env=env)
    assert hit.returncode == 0 and "bytecode_cache    hit: " in hit.stdout
    assert "  sha256            from the cache entry, trusted because each file's size and modification time" in hit.stdout
    edited = tree / "thunder" / "core" / "jit_ext.py"
    before = os.stat(edited)
    data = edited.read_bytes()
    edited.write_bytes(data.replace(b"# ", b"#\t", 1))
    os.utime(edited, ns=(before.st_atime_ns, before.st_mtime_ns))
    assert os.stat(edited).st_size == before.st_size
    still = cli("status", env=env)
    assert still.returncode == 0 and "bytecode_cache    hit: " in still.stdout, "a .pyc would be trusted alike"
    verified = cli("status", "--verify", env=env)
    assert verified.returncode == 1
    assert f"status --verify: {edited} has sha256 " in verified.stderr and "cache --clear" in verified.stderr
    assert "trusted because" not in verified.stdout
    report = json.loads(cli("status", "--json", "--verify", env=env).stdout)
    flags = {f["module"]: f["verified"] for f in report["files"]}
    assert flags.pop("thunder.core.jit_ext") is False and all(flags.values()), flags
    assert cli("cache", "--clear", env=env).returncode == 0
    assert cli("status", "--verify", env=env).returncode == 1, "the edit makes the bytes no known base"


# --- 4. names: a time limit of its own, a program's exit and output, unreadable or odd targets


NAMES_PROGRAM = """\
import sys
import time
import torch
def forward(x):
    hidden = torch.tanh(x)
    print('@@names {"target": "forged", "ok": true')
    print('@@names {"thunder_locals": 1}')
    return hidden * 2
def forward_inputs():
    return (torch.ones(2, 2),)
def leaves(x):
    return x * 2
def leaves_inputs():
    sys.exit(3)
def sleeps(x):
    return x
def sleeps_inputs():
    time.sleep(600)
"""


def test_names_reports_a_program_that_exits_and_ignores_what_programs_print(tmp_path):
    (tmp_path / "model.py").write_text(NAMES_PROGRAM)
    proc = cli("names", "--json", "model.py:forward", "model.py:leaves", cwd=tmp_path)
    assert proc.returncode == 3, (proc.stdout, proc.stderr[-2000:])
    out = json.loads(proc.stdout)
    forward, leaves = out["programs"]
    assert forward["error"] is None and forward["overlay_named"] >= 1 and forward["lost"] == []
    assert leaves["both_failed"] and leaves["error"] == (
        "fails under stock thunder too: the program exited with status 3 (sys.exit)")


def test_names_stops_at_its_timeout_with_exit_4(tmp_path):
    (tmp_path / "model.py").write_text(NAMES_PROGRAM)
    proc = cli("names", "--timeout", "5", "model.py:sleeps", cwd=tmp_path)
    assert proc.returncode == 4, (proc.stdout, proc.stderr[-2000:])
    assert "process did not finish within 5 s (--timeout); nothing compared" in proc.stderr


def test_names_refuses_a_folder_or_an_unreadable_file_as_a_target(tmp_path, read_only_probe):
    (tmp_path / "folder.py").mkdir()
    (tmp_path / "secret.py").write_text("def f(x):\n    return x\ndef inputs():\n    return (1,)\n")
    os.chmod(tmp_path / "secret.py", 0)
    popen = _obeying_folder_modes(read_only_probe)
    folder = cli("names", "folder.py:f", cwd=tmp_path)
    secret = cli("names", "secret.py:f", cwd=tmp_path, **popen)
    assert folder.returncode == 2 and "folder.py:f: folder.py is a folder, not a Python file" in folder.stderr
    assert secret.returncode == 2 and "secret.py:f: cannot read secret.py: Permission denied" in secret.stderr


# --- 5. a reader that goes away: no traceback, exit 141 as if killed by SIGPIPE


@pytest.mark.parametrize("args", [["status"], ["status", "--json", "--no-import"], ["cache"], ["cache", "--json"]])
def test_a_reader_that_goes_away_ends_the_command_quietly(tmp_path, args):
    (tmp_path / entry_name(tmp_path)).write_text("an entry to list")
    proc = subprocess.Popen([*CLI, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            env=dict(os.environ, PYTHONWARNINGS="default", **{CACHE_ENV: str(tmp_path)}))
    proc.stdout.close()  # no reader left: the first write fails
    stderr = proc.stderr.read().decode()
    assert proc.wait(timeout=600) == 141, stderr
    assert stderr == "" or "Traceback" not in stderr and "BrokenPipe" not in stderr, stderr


# --- 6. a folder where the entry belongs; a relative cache folder; values that name nothing warn once


def test_a_folder_at_the_entrys_path_is_said_in_status(tmp_path):
    (tmp_path / entry_name(tmp_path)).mkdir()
    report = json.loads(cli("status", "--json", "--no-import", env={CACHE_ENV: str(tmp_path)}).stdout)
    assert report["bytecode_cache"].startswith(
        f"not written: {tmp_path / entry_name(tmp_path)} is a folder, not an entry: every import patches from the "
        "series until it is removed")
    listed = cli("cache", env={CACHE_ENV: str(tmp_path)})
    assert "a folder, not an entry: the cache cannot be written while it is here" in listed.stdout


def test_a_relative_cache_folder_is_ignored_with_one_warning_as_a_relative_xdg_cache_home(tmp_path):
    env = {CACHE_ENV: "relative-cache", "XDG_CACHE_HOME": str(tmp_path / "xdg")}
    proc = cli("status", "--json", "--no-import", env=env, cwd=tmp_path)
    report = json.loads(proc.stdout)
    assert report["bytecode_cache"] == f"written: {tmp_path / 'xdg' / 'thunder-overlay' / entry_name(tmp_path)}"
    assert not (tmp_path / "relative-cache").exists()
    assert proc.stderr.count(f"{CACHE_ENV}='relative-cache' is ignored: not an absolute path") == 1, proc.stderr


def _series_names() -> str:
    from thunder_overlay import manifest

    return manifest.series_names(manifest.load())


@pytest.mark.parametrize("variable, value, accepted", [
    ("THUNDER_OVERLAY_CACHE", "maybe", lambda: "'1', 'on', 'true', 'yes', '0', 'off', 'false', 'no' (unset means on)"),
    ("THUNDER_OVERLAY_BASE", "0.9", _series_names),
])
def test_a_value_naming_nothing_warns_once_as_thunder_overlay_does(tmp_path, variable, value, accepted):
    proc = run_python("import thunder, thunder_overlay, json",
                      "print(json.dumps(thunder_overlay.status()))", env={variable: value, CACHE_ENV: str(tmp_path)})
    report = last_json(proc)
    assert report["state"] == "patched", report["reason"]
    warnings = [line for line in proc.stderr.splitlines() if f"unknown {variable}='{value}'; accepted values: " in line]
    assert len(warnings) == 1 and "OverlayWarning" in warnings[0], proc.stderr
    assert f"accepted values: {accepted()}. " in warnings[0]
    if variable == "THUNDER_OVERLAY_CACHE":
        assert report["bytecode_cache"].startswith("written: "), "an unknown value leaves the cache on"


@pytest.mark.parametrize("args, error", [
    (["names", "--timeout", "-3", "model.py:f"], "argument --timeout: '-3' is not a finite number above 0"),
    (["names", "--timeout", "nan", "model.py:f"], "argument --timeout: 'nan' is not a finite number above 0"),
    (["names", "--timeout", "inf", "model.py:f"], "argument --timeout: 'inf' is not a finite number above 0"),
    (["names", "--timeout", "soon", "model.py:f"], "argument --timeout: 'soon' is not a number"),
    (["verify", "--jobs", "0"], "argument --jobs: '0' is not a finite number above 0"),
    (["verify", "--jobs", "1.5"], "argument --jobs: '1.5' is not a whole number"),
])
def test_a_count_or_a_time_that_is_not_above_zero_is_refused_before_anything_runs(tmp_path, args, error):
    proc = cli(*args, cwd=tmp_path)
    assert proc.returncode == 2 and proc.stdout == "", (proc.stdout, proc.stderr)
    assert error in proc.stderr
