"""Every way thunder is installed patches when the bytes of the files its series changes are a known base: a
source tree on PYTHONPATH, a real editable install, two dist-info folders side by side, a local version. Each
case is a real copy of the installed thunder, imported in a fresh process."""

import base64
import shutil
import subprocess
import sys

import pytest

from conftest import IMPORT_AND_STATUS, copy_thunder, installed_base, installed_dist_info, last_json, run_python
from thunder_overlay import manifest


def import_from(directory) -> dict:
    out = last_json(run_python(IMPORT_AND_STATUS, env={"PYTHONPATH": str(directory)}))
    assert out["file"].startswith(str(directory)), "the copy, not the installed thunder, was imported"
    return out


def assert_patched_known(out: dict) -> dict:
    status = out["status"]
    assert out["patched"] and status["state"] == "patched", status
    assert status["known"] and status["base"] == installed_base().name and status["patches"]
    return status


def test_source_tree_without_distribution_metadata_is_patched(tmp_path):
    tree = copy_thunder(tmp_path, dist_info=False)
    status = assert_patched_known(import_from(tree))
    assert status["install"].startswith("source tree (no distribution metadata beside it")
    assert status["thunder_version"] is None and status["thunder_path"] == str(tree / "thunder")


@pytest.mark.slow
def test_editable_install_is_patched(tmp_path):
    # A real `pip install -e` of a thunder source tree (into --target, so the environment's thunder stays).
    source = copy_thunder(tmp_path / "src", dist_info=False)
    release = installed_dist_info().name.removeprefix("lightning_thunder-").removesuffix(".dist-info")
    (source / "pyproject.toml").write_text(
        '[build-system]\nrequires = ["hatchling"]\nbuild-backend = "hatchling.build"\n'
        f'[project]\nname = "lightning-thunder"\nversion = "{release}"\n'
        '[tool.hatch.build.targets.wheel]\npackages = ["thunder"]\ndev-mode-dirs = ["."]\n'
    )
    target = tmp_path / "site"
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation", "--no-index",
         "--target", str(target), "-e", str(source)],
        check=True, capture_output=True,
    )
    assert not (target / "thunder").exists(), "an editable install leaves the package in its source tree"
    # The editable .pth only runs from a site directory: add the target as one, ahead of the environment's.
    code = (
        f"import site, sys; before = list(sys.path); site.addsitedir({str(target)!r}); "
        "sys.path[:] = [p for p in sys.path if p not in before] + before\n"
    )
    out = last_json(run_python(code + IMPORT_AND_STATUS))
    assert out["file"].startswith(str(source))
    status = assert_patched_known(out)
    assert status["install"].startswith(f"editable (lightning_thunder-{release}.dist-info in {target}, source {source}")
    assert status["thunder_version"] == release


def _leftover_dist_info(tree, base: manifest.Base):
    """A dist-info of another release beside the installed one, as an upgrade that failed half-way leaves
    it: its METADATA names that release and its RECORD that release's hashes of the files its series changes."""
    release = base.releases[0]
    leftover = tree / f"lightning_thunder-{release}.dist-info"
    shutil.copytree(installed_dist_info(), leftover)
    metadata = leftover / "METADATA"
    metadata.write_text("".join(
        f"Version: {release}\n" if line.startswith("Version:") else line
        for line in metadata.read_text().splitlines(keepends=True)
    ))
    recorded = {path: base64.urlsafe_b64encode(bytes.fromhex(sha256)).rstrip(b"=").decode()
                for path, sha256 in base.files.items()}
    record = leftover / "RECORD"
    record.write_text("".join(
        f"{path},sha256={recorded[path]},{line.rsplit(',', 1)[1]}" if (path := line.split(",")[0]) in recorded else line
        for line in record.read_text().splitlines(keepends=True)
    ))
    return leftover


@pytest.mark.slow
def test_two_dist_info_folders_are_told_apart_by_the_files_bytes(tmp_path):
    tree = copy_thunder(tmp_path)
    # The leftover sorts first where it can (an older release), as the one a name-sorted lookup picked.
    others = [b for b in manifest.load() if b.name != installed_base().name]
    leftover = _leftover_dist_info(tree, min(others, key=lambda b: manifest.release_key(b.releases[0])))
    installed = installed_dist_info().name
    status = assert_patched_known(import_from(tree))
    assert status["install"] == f"wheel ({installed}; also {leftover.name} beside it, left over from another install)"
    assert status["thunder_version"] == installed.removeprefix("lightning_thunder-").removesuffix(".dist-info")


@pytest.mark.slow
def test_local_version_is_patched(tmp_path):
    tree = copy_thunder(tmp_path, dist_info=False)
    release = installed_dist_info().name.removeprefix("lightning_thunder-").removesuffix(".dist-info")
    local = tree / f"lightning_thunder-{release}+local.dist-info"
    shutil.copytree(installed_dist_info(), local)
    metadata = local / "METADATA"
    metadata.write_text(metadata.read_text().replace(f"\nVersion: {release}\n", f"\nVersion: {release}+local\n", 1))
    status = assert_patched_known(import_from(tree))
    assert status["thunder_version"] == f"{release}+local"
    assert status["install"] == f"wheel ({local.name})"
