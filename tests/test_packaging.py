"""The wheel carries the patches and the start-up hook, and works when installed as a wheel."""

import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from conftest import PATCHES, REPO


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "-w", str(out), str(REPO)],
        check=True,
    )
    (path,) = out.glob("thunder_overlay-*.whl")
    return path


def test_wheel_contains_every_patch_the_manifest_and_the_hooks(wheel):
    names = set(zipfile.ZipFile(wheel).namelist())
    expected = {f"thunder_overlay/patches/{p.relative_to(PATCHES)}" for p in PATCHES.rglob("*") if p.is_file()}
    assert "thunder_overlay/patches/manifest.toml" in expected
    assert expected <= names, sorted(expected - names)
    assert {"thunder_overlay.pth", "thunder_overlay.start", "thunder_overlay/engine.py", "thunder_overlay/config.py"} <= names
    hook = zipfile.ZipFile(wheel).read("thunder_overlay.pth").decode()
    assert hook.startswith("import os;") and "THUNDER_OVERLAY" in hook
    (license_file,) = [n for n in names if n.endswith(".dist-info/licenses/LICENSE")]
    assert zipfile.ZipFile(wheel).read(license_file) == (REPO / "LICENSE").read_bytes()
    assert b"Apache License\n                           Version 2.0" in (REPO / "LICENSE").read_bytes()


def test_wheel_metadata_matches_what_the_readme_claims(wheel):
    import thunder_overlay

    (metadata,) = [n for n in zipfile.ZipFile(wheel).namelist() if n.endswith(".dist-info/METADATA")]
    text = zipfile.ZipFile(wheel).read(metadata).decode()
    assert f"\nVersion: {thunder_overlay.__version__}\n" in text and wheel.name.startswith(
        f"thunder_overlay-{thunder_overlay.__version__}-"
    )
    assert "\nRequires-Python: >=3.10\n" in text and "\nLicense-Expression: Apache-2.0\n" in text
    assert f"pip install dist/{wheel.name}" in (REPO / "README.md").read_text(), "the install section names this wheel"


def test_installed_wheel_patches_thunder(wheel, tmp_path):
    import thunder

    target = tmp_path / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(target), str(wheel)],
                   check=True)
    # -S, then the wheel's directory as a site directory (its .pth runs) before those holding thunder
    # (a release the version matrix put on PYTHONPATH comes first) and its dependencies.
    import site

    sites = [str(target), str(Path(thunder.__file__).parents[1]), *site.getsitepackages()]
    code = (
        f"import site; [site.addsitedir(d) for d in {sites!r}]; "
        "import json, thunder.core.jit_ext, thunder_overlay as t; print(json.dumps([t.__file__, t.status()]))"
    )
    # without PYTHONPATH: an overlay/ put there (a worktree's) would shadow the wheel's
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    proc = subprocess.run([sys.executable, "-S", "-c", code], capture_output=True, text=True, env=env)
    assert proc.returncode == 0, proc.stderr
    module_file, status = json.loads(proc.stdout.splitlines()[-1])
    assert module_file.startswith(str(target))
    assert status["state"] == "patched" and status["patches_dir"].startswith(str(target))


def _requires_thunder(wheel: Path) -> str:
    (metadata,) = [n for n in zipfile.ZipFile(wheel).namelist() if n.endswith(".dist-info/METADATA")]
    lines = zipfile.ZipFile(wheel).read(metadata).decode().splitlines()
    (line,) = [x for x in lines if x.startswith("Requires-Dist: lightning-thunder")]
    return line.removeprefix("Requires-Dist: lightning-thunder")


# Upstream main at the manifest's commit calls itself 0.2.7.dev0 in git (thunder/__about__.py); the nightly built
# from it is on the package index as 0.2.7.dev20260201, with the sha256 of every file main's series changes.
MAIN_IN_GIT, MAIN_NIGHTLY = "0.2.7.dev0", "0.2.7.dev20260201"


def versions_to_admit(bases) -> list[str]:
    """Every version pip must accept: each release name of the manifest that is a version (final releases and
    nightlies alike), and main's, as git and the nightly name it."""
    from packaging.version import InvalidVersion, Version

    from thunder_overlay import manifest

    found = {MAIN_IN_GIT, MAIN_NIGHTLY}
    for release in manifest.supported_releases(bases):
        try:
            found.add(str(Version(release)))
        except InvalidVersion:
            assert release.startswith("main@"), release  # upstream main from git, named by its commit
    return sorted(found, key=Version)


def versions_beyond(newest: str) -> list[str]:
    """Versions no base has, just past ``newest`` (a final release or a nightly), and around the range."""
    from packaging.version import Version

    v = Version(newest)
    major, minor, patch = (*v.release, 0, 0)[:3]
    beyond = ["0.2.0", f"{major}.{minor + 1}.0", f"{major + 1}.0.0", f"{major}.{minor}.{patch + 1}"]
    if v.is_devrelease:  # the next nightly, and the release the nightlies lead to
        beyond += [f"{v.base_version}.dev{v.dev + 1}", f"{v.base_version}rc1", v.base_version]
    return beyond


def admits_exactly(specifier: str, bases) -> list[str]:
    """What is wrong with ``specifier`` (a Requires-Dist bound) for the manifest ``bases``: each version it
    refuses that a base ships, each version past the newest that it admits."""
    from packaging.specifiers import SpecifierSet

    allowed = SpecifierSet(specifier)
    versions = versions_to_admit(bases)
    wrong = [f"refuses {v}" for v in versions if not allowed.contains(v, prereleases=True)]
    return wrong + [f"admits {v}" for v in versions_beyond(versions[-1]) if allowed.contains(v, prereleases=True)]


def test_the_wheel_allows_exactly_the_thunder_releases_it_has_a_base_for(wheel):
    from thunder_overlay import manifest

    bases = manifest.load(PATCHES)
    assert any(r.startswith("main@") for r in manifest.supported_releases(bases))
    assert admits_exactly(_requires_thunder(wheel), bases) == []


def test_the_bound_check_takes_nightlies_the_manifest_lists(tmp_path):
    # A nightly added to a base's releases, as docs/maintaining.md says for a release with a base's bytes: the
    # check reads it as a version (not "0.2.dev20251116" as an int), and a bound without it is wrong.
    from thunder_overlay import manifest

    text = (PATCHES / "manifest.toml").read_text().replace('releases = ["main@1e22aacb1"',
                                                           'releases = ["main@1e22aacb1", "0.2.7.dev20251116"')
    assert "0.2.7.dev20251116" in text
    (tmp_path / "manifest.toml").write_text(text)
    bases = manifest.load(tmp_path)
    assert "0.2.7.dev20251116" in versions_to_admit(bases)
    assert admits_exactly(">=0.2.1,<=0.2.7.dev20260201", bases) == []
    assert admits_exactly(">=0.2.1,<=0.2.7.dev0", bases) == ["refuses 0.2.7.dev20251116", "refuses 0.2.7.dev20260201"]
    assert admits_exactly(">=0.2.1,<0.2.8", bases) == ["admits 0.2.7.dev20260202", "admits 0.2.7rc1", "admits 0.2.7"]


def test_release_names_sort_as_pip_orders_versions():
    # messages list the supported releases in this order, and name the newest; a nightly is older than its release
    from packaging.version import Version

    from thunder_overlay import manifest

    names = ["0.2.7", "main@1e22aacb1", "0.2.10", MAIN_NIGHTLY, "0.2.6", MAIN_IN_GIT, "0.2.7.dev20251116", "0.2.1"]
    ordered = sorted(names, key=manifest.release_key)
    assert ordered[-1] == "main@1e22aacb1"
    assert ordered[:-1] == sorted(ordered[:-1], key=Version) == [
        "0.2.1", "0.2.6", MAIN_IN_GIT, "0.2.7.dev20251116", MAIN_NIGHTLY, "0.2.7", "0.2.10"]


def _fake_wheel(folder: Path, name: str, version: str) -> Path:
    """A wheel of ``name`` ``version`` with metadata only (no dependencies, no files): what pip's resolver sees."""
    dist = f"{name.replace('-', '_')}-{version}"
    files = {f"{dist}.dist-info/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n",
             f"{dist}.dist-info/WHEEL": "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\n"
                                        "Tag: py3-none-any\n"}
    files[f"{dist}.dist-info/RECORD"] = "".join(f"{n},,\n" for n in [*files, f"{dist}.dist-info/RECORD"])
    path = folder / f"{dist}-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as z:
        for n, text in files.items():
            z.writestr(n, text)
    return path


@pytest.mark.parametrize("version, resolves", [(MAIN_NIGHTLY, True), ("0.2.6", True), ("0.2.7.dev20260208", False)])
def test_pip_installs_the_wheel_beside_main_s_nightly_without_a_conflict(wheel, tmp_path, version, resolves):
    # pip's resolver, offline, ignoring this environment, with a lightning-thunder of that version (its metadata
    # only): main's nightly and a release resolve with the overlay; the next nightly, of a main no base has, does not.
    index = tmp_path / "index"
    index.mkdir()
    _fake_wheel(index, "lightning-thunder", version)
    if sys.version_info < (3, 11):
        _fake_wheel(index, "tomli", "2.0.1")
    report = tmp_path / "report.json"
    proc = subprocess.run([sys.executable, "-m", "pip", "install", "--dry-run", "--ignore-installed", "--no-index",
                           "--find-links", str(index), "--report", str(report), str(wheel),
                           f"lightning-thunder=={version}"], capture_output=True, text=True)
    if resolves:
        assert proc.returncode == 0, proc.stderr[-2000:]
        installs = {item["metadata"]["name"]: item["metadata"]["version"]
                    for item in json.loads(report.read_text())["install"]}
        assert installs.get("lightning-thunder") == version and "thunder-overlay" in installs, installs
    else:
        assert proc.returncode != 0 and "conflict" in proc.stderr.lower(), proc.stderr[-2000:]


def test_installing_the_wheel_where_thunder_runs_installs_nothing_else(wheel, tmp_path):
    # pip's own resolver, against this environment, offline: only the overlay would be installed (torch and
    # thunder stay as they are).
    report = tmp_path / "report.json"
    proc = subprocess.run([sys.executable, "-m", "pip", "install", "--dry-run", "--no-index", "--report", str(report),
                           str(wheel)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-2000:]
    installs = [item["metadata"]["name"] for item in json.loads(report.read_text())["install"]]
    assert installs == ["thunder-overlay"], installs
