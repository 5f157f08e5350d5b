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


def test_the_wheel_allows_exactly_the_thunder_releases_it_has_a_base_for(wheel):
    from packaging.specifiers import SpecifierSet

    from thunder_overlay import manifest

    allowed = SpecifierSet(_requires_thunder(wheel))
    releases = [r for r in manifest.supported_releases(manifest.load(PATCHES)) if r[0].isdigit()]
    assert releases and all(allowed.contains(r) for r in releases), (str(allowed), releases)
    # upstream main at the manifest's commit calls itself 0.2.7.dev0 (thunder/__about__.py)
    assert any(r.startswith("main@") for r in manifest.supported_releases(manifest.load(PATCHES)))
    assert allowed.contains("0.2.7.dev0", prereleases=True)
    newest = max(releases, key=manifest.release_key)
    major, minor, patch = map(int, newest.split("."))
    for unsupported in ("0.2.0", f"{major}.{minor}.{patch + 1}", f"{major}.{minor + 1}.0", f"{major + 1}.0.0"):
        assert not allowed.contains(unsupported, prereleases=True), unsupported


def test_installing_the_wheel_where_thunder_runs_installs_nothing_else(wheel, tmp_path):
    # pip's own resolver, against this environment, offline: only the overlay would be installed (torch and
    # thunder stay as they are).
    report = tmp_path / "report.json"
    proc = subprocess.run([sys.executable, "-m", "pip", "install", "--dry-run", "--no-index", "--report", str(report),
                           str(wheel)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-2000:]
    installs = [item["metadata"]["name"] for item in json.loads(report.read_text())["install"]]
    assert installs == ["thunder-overlay"], installs
