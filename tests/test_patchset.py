"""The patch engine against the real upstream file and the real patch series."""

import hashlib
import re
from pathlib import Path

import pytest

from thunder_overlay import manifest
from thunder_overlay.patchset import PatchApplyError, PatchError, apply_series, parse_patch, read_series

from conftest import PATCHES, installed_base, installed_jit_ext

BASES = manifest.load(PATCHES)
# DEP-3's required fields (Bug only where an upstream report exists)
DEP3_FIELDS = ("Description", "Origin", "Forwarded", "Last-Update")


@pytest.mark.parametrize("base", BASES, ids=lambda b: b.directory.name)
def test_series_lists_each_patch_once_with_a_dep3_header(base):
    names = [n.strip() for n in (base.directory / "series").read_text().splitlines() if n.strip() and not n.startswith("#")]
    assert len(names) == len(set(names)) and names
    on_disk = sorted(p.name for p in base.directory.glob("*.patch"))
    assert sorted(names) == on_disk, "every patch file is in the series and every series entry exists"
    for patch in read_series(base.directory):
        fields = patch.header_fields()
        missing = [f for f in DEP3_FIELDS if not fields.get(f)]
        assert not missing, f"{patch.name} lacks {missing}"
        assert fields.get("Bug", "https://").startswith("https://"), f"{patch.name}: Bug is not a link"
        assert re.search(r"^Subject: \[PATCH( \d+/\d+)?\] \S", patch.header, re.M), f"{patch.name} is not a git mail"
        assert re.fullmatch(r"\d{4}-\d\d-\d\d", fields["Last-Update"])
        assert patch.diff_of(manifest.TARGET_PATH), f"{patch.name} does not change {manifest.TARGET_PATH}"
        tests = [f.path for f in patch.files if f.path != manifest.TARGET_PATH]
        assert tests and all(re.fullmatch(r"thunder/tests/test_\w+\.py", t) for t in tests), (patch.name, tests)


def test_manifest_hashes_are_sha256_and_releases_unique():
    releases = [r for b in BASES for r in b.releases]
    assert len(releases) == len(set(releases))
    assert all(re.fullmatch(r"[0-9a-f]{64}", b.sha256) for b in BASES)


def test_installed_file_matches_its_manifest_entry_and_series_applies():
    text = installed_jit_ext().read_bytes()
    base = installed_base()
    assert hashlib.sha256(text).hexdigest() == base.sha256
    patched = apply_series(text.decode(), read_series(base.directory), manifest.TARGET_PATH)
    assert patched != text.decode()
    compile(patched, "jit_ext.py", "exec")


def test_hunk_applies_with_an_offset_but_not_with_changed_context():
    text = installed_jit_ext().read_text()
    patches = read_series(installed_base().directory)
    shifted = "# one\n# two\n# three\n" + text
    assert apply_series(shifted, patches, manifest.TARGET_PATH).startswith("# one\n")

    target = patches[0].diff_of(manifest.TARGET_PATH).hunks[0].old_lines[0]
    altered = text.replace(target, target + "  # edited", 1)
    with pytest.raises(PatchApplyError) as info:
        apply_series(altered, patches, manifest.TARGET_PATH)
    err = info.value
    assert err.hunk == 1 and err.patch.endswith(".patch")
    assert err.expected == target and err.actual == target + "  # edited"
    assert f"hunk #1 does not apply at line {err.line}" in str(err)


def test_truncated_patch_is_rejected():
    path = installed_base().directory / (read_series(installed_base().directory)[0].name)
    text = Path(path).read_text()
    cut = text[: text.index("@@", text.index("@@") + 2) + 40]  # inside the second hunk
    with pytest.raises(PatchError, match="truncated"):
        parse_patch(cut, "cut.patch")


@pytest.mark.parametrize(
    "text, match",
    [
        ("", "not a unified diff"),
        ("Subject: x\n--- a/f.py\n", "not followed"),
        ("--- a/f.py\n+++ b/f.py\n@@ -1,2 +1,2 @@\n a\n?b\n", "corrupt line"),
        ("--- a/f.py\n+++ b/f.py\n@@ garbage @@\n", "malformed hunk header"),
        ("--- a/f.py\n+++ b/g.py\n@@ -1 +1 @@\n-a\n+b\n", "renames or creates"),
        ("--- a/f.py\n+++ b/f.py\n@@ -1 +1 @@\n-a\n+b\nstray\n", "unexpected text"),
    ],
)
def test_corrupt_patches_are_rejected(text, match):
    with pytest.raises(PatchError, match=match):
        parse_patch(text, "bad.patch")


def test_series_that_never_changes_the_target_is_rejected():
    patch = parse_patch("--- a/thunder/other.py\n+++ b/thunder/other.py\n@@ -1 +1 @@\n-a\n+b\n", "other.patch")
    with pytest.raises(PatchError, match="no patch of the series changes thunder/core/jit_ext.py"):
        apply_series("a\n", [patch], manifest.TARGET_PATH)


def test_only_the_target_file_of_a_patch_is_applied():
    text = (
        "Subject: [PATCH] x\n---\n"
        "diff --git a/thunder/core/jit_ext.py b/thunder/core/jit_ext.py\nindex 1..2 100644\n"
        "--- a/thunder/core/jit_ext.py\n+++ b/thunder/core/jit_ext.py\n@@ -1,2 +1,2 @@\n a\n-b\n+c\n"
        "diff --git a/thunder/tests/test_x.py b/thunder/tests/test_x.py\nindex 3..4 100644\n"
        "--- a/thunder/tests/test_x.py\n+++ b/thunder/tests/test_x.py\n@@ -1 +1,2 @@\n z\n+def test_y(): ...\n"
    )
    patch = parse_patch(text, "two.patch")
    assert [f.path for f in patch.files] == [manifest.TARGET_PATH, "thunder/tests/test_x.py"]
    assert apply_series("a\nb\n", [patch], manifest.TARGET_PATH) == "a\nc\n"
    assert apply_series("z\n", [patch], "thunder/tests/test_x.py") == "z\ndef test_y(): ...\n"
    with pytest.raises(PatchError, match="changes a file in two places"):
        parse_patch(text + text[text.index("diff --git a/thunder/tests"):], "twice.patch")


def test_series_naming_a_missing_or_repeated_patch_is_rejected(tmp_path):
    (tmp_path / "series").write_text("0001-x.patch\n")
    with pytest.raises(PatchError, match="does not exist"):
        read_series(tmp_path)
    (tmp_path / "0001-x.patch").write_text("--- a/f\n+++ b/f\n@@ -1 +1 @@\n-a\n+b\n")
    (tmp_path / "series").write_text("0001-x.patch\n0001-x.patch\n")
    with pytest.raises(PatchError, match="more than once"):
        read_series(tmp_path)
