"""tools/series.py with a series that changes several files of thunder: `port` cherry-picks a commit that
changes two of them onto another base, `export` writes each base's patches, series file and the manifest's
[base.files], and the engine's patchset then turns each base's files into the branch's. A real git
repository shaped like thunder's (tags per release, the series on thunder-overlay/<base>)."""

import hashlib
import os
import subprocess
import sys

import pytest

from conftest import REPO
from thunder_overlay import manifest
from thunder_overlay.patchset import apply_series, read_series

GIT_ENV = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@invalid", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@invalid", "GIT_CONFIG_GLOBAL": os.devnull, "GIT_CONFIG_NOSYSTEM": "1"}
FILES = ["thunder/core/jit_ext.py", "thunder/core/interpreter.py"]


def git(repo, *args) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True,
                          env=dict(os.environ, **GIT_ENV)).stdout


def write(repo, files: dict[str, str]) -> None:
    for path, text in files.items():
        (repo / path).parent.mkdir(parents=True, exist_ok=True)
        (repo / path).write_text(text)


def body(name: str, release: str) -> str:
    """A module whose head differs per release and whose tail (where the series changes it) does not."""
    return f"# {name} of {release}\n" + "".join(f"line_{i} = {i}\n" for i in range(20))


@pytest.fixture
def thunder_git(tmp_path):
    repo = tmp_path / "thunder"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    for release in ("0.2.4", "0.2.5", "0.2.6"):
        extra = "# interpreter.py of 0.2.4 differs more\n" if release == "0.2.4" else ""
        write(repo, {FILES[0]: body("jit_ext", release), FILES[1]: body("interpreter", release) + extra,
                     "thunder/tests/test_jit_general.py": f"# tests of {release}\n"})
        git(repo, "add", "-A")
        git(repo, "commit", "-q", "-m", release)
        git(repo, "tag", release)
    git(repo, "checkout", "-q", "-b", "thunder-overlay/0.2.6", "0.2.6")
    for path in FILES:
        (repo / path).write_text((repo / path).read_text().replace("line_19 = 19\n", "line_19 = 19  # fixed\n"))
    write(repo, {"thunder/tests/test_jit_general.py": "# tests of 0.2.6\ndef test_fixed():\n    pass\n"})
    git(repo, "commit", "-q", "-am", "jit: fix a thing in jit_ext and interpreter\n\nDescription: the fix")
    git(repo, "checkout", "-q", "main")
    return repo


def patches_folder(tmp_path, bases: dict[str, list[str]]):
    """A patches/ folder with an empty series per base and a manifest listing only jit_ext for each."""
    folder = tmp_path / "patches"
    text = ""
    for name, releases in bases.items():
        (folder / name).mkdir(parents=True)
        (folder / name / "series").write_text("")
        text += f'[[base]]\nreleases = {releases!r}\ndir = "{name}"\n\n[base.files]\n"{FILES[0]}" = "{"0" * 63}{len(text) % 10}"\n\n'
    (folder / "manifest.toml").write_text(text.replace("'", '"'))
    return folder


def series_tool(command: str, repo, patches):
    return subprocess.run([sys.executable, str(REPO / "tools" / "series.py"), command, "--thunder-git", str(repo)],
                          capture_output=True, text=True, env=dict(os.environ, THUNDER_OVERLAY_PATCHES=str(patches), **GIT_ENV))


def test_port_and_export_carry_every_file_of_thunder_the_series_changes(thunder_git, tmp_path):
    patches = patches_folder(tmp_path, {"0.2.5": ["0.2.5"], "0.2.6": ["0.2.6"]})
    port = series_tool("port", thunder_git, patches)
    assert port.returncode == 0, port.stderr
    assert git(thunder_git, "diff", "--name-only", "0.2.5", "thunder-overlay/0.2.5").split() == [
        *sorted(FILES), "thunder/tests/test_jit_general.py"]
    export = series_tool("export", thunder_git, patches)
    assert export.returncode == 0, export.stderr
    bases = manifest.load(patches)
    for base in bases:
        tag = base.name
        assert sorted(base.files) == sorted(FILES), "the manifest lists every file of thunder the series changes"
        series = (base.directory / "series").read_text()
        assert series.startswith(f"# Applied in order to lightning-thunder {tag}. The overlay applies each patch to every\n")
        for path in FILES:
            at_tag = git(thunder_git, "show", f"{tag}:{path}")
            assert base.files[path] == hashlib.sha256(at_tag.encode()).hexdigest()
            patched = apply_series(at_tag, read_series(base.directory), path)
            assert patched == git(thunder_git, "show", f"thunder-overlay/{tag}:{path}")


def test_export_stops_where_a_release_of_a_base_ships_other_bytes(thunder_git, tmp_path):
    # 0.2.4's interpreter.py differs from 0.2.6's: the two cannot share one base.
    git(thunder_git, "branch", "thunder-overlay/0.2.4", "thunder-overlay/0.2.6")
    patches = patches_folder(tmp_path, {"0.2.6": ["0.2.6", "0.2.4"]})
    export = series_tool("export", thunder_git, patches)
    assert export.returncode != 0
    assert "0.2.4 and 0.2.6 share the base 0.2.6 but differ in thunder/core/interpreter.py" in export.stderr


def test_upstream_installed_applies_the_test_hunks_of_the_installed_base_as_git_am_does():
    # A hunk that appends a test repeats the module's last lines as context, which can occur twice; the engine
    # refuses such hunks in thunder's files, so the tool applies the test modules' hunks with git apply
    sys.path.insert(0, str(REPO / "tools"))
    import thunder
    import upstream
    from conftest import installed_base

    base = installed_base()
    patches = read_series(base.directory)
    root = os.path.dirname(os.path.dirname(thunder.__file__))
    added = [name for names in upstream.added_tests(patches).values() for name in names]
    texts = [upstream.patched_test_module(upstream.Path(root), base.directory, patches, path)
             for path in upstream.test_paths(patches)]
    assert added and all(sum(f"\ndef {name}(" in text for text in texts) == 1 for name in added)
