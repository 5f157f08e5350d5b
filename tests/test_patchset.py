"""The patch engine against the real upstream file and the real patch series."""

import hashlib
import re
from pathlib import Path

import pytest

from thunder_overlay import manifest
from thunder_overlay.patchset import (
    AmbiguousHunkError, PatchApplyError, PatchError, apply_series, parse_patch, read_series,
)

from conftest import PATCHES, installed_base, installed_file

JIT_EXT = "thunder/core/jit_ext.py"

BASES = manifest.load(PATCHES)
# A DEP-3 block is this project's bookkeeping, not a commit message upstream would take
DEP3_FIELDS = ("Description", "Origin", "Forwarded", "Last-Update")


@pytest.mark.parametrize("base", BASES, ids=lambda b: b.directory.name)
def test_series_lists_each_patch_once_as_a_git_mail_that_says_why(base):
    names = [n.strip() for n in (base.directory / "series").read_text().splitlines() if n.strip() and not n.startswith("#")]
    assert len(names) == len(set(names)) and names
    on_disk = sorted(p.name for p in base.directory.glob("*.patch"))
    assert sorted(names) == on_disk, "every patch file is in the series and every series entry exists"
    for patch in read_series(base.directory):
        assert re.search(r"^Subject: \[PATCH( \d+/\d+)?\] \S", patch.header, re.M), f"{patch.name} is not a git mail"
        dep3 = [f for f in DEP3_FIELDS if f in patch.header_fields()]
        assert not dep3, f"{patch.name} has DEP-3 fields {dep3}: its message must read as upstream's commits do"
        body = patch.header.partition("\n\n")[2].partition("\n---\n")[0]
        assert len(body.split()) >= 30, f"{patch.name}: the message does not say what changes and why"
        assert patch.patched_paths(), f"{patch.name} changes no file of thunder but tests"
        tests = [f.path for f in patch.files if f.path not in patch.patched_paths()]
        assert tests and all(re.fullmatch(r"thunder/tests/test_\w+\.py", t) for t in tests), (patch.name, tests)


@pytest.mark.parametrize("base", BASES, ids=lambda b: b.directory.name)
def test_manifest_lists_exactly_the_files_the_series_changes(base):
    changed = {path for patch in read_series(base.directory) for path in patch.patched_paths()}
    assert changed == set(base.files)


def test_manifest_releases_are_unique():
    releases = [r for b in BASES for r in b.releases]
    assert len(releases) == len(set(releases))


@pytest.mark.parametrize("damage, match", [
    ('"thunder/core/jit_ext.py" = "', "is not 64 hex digits"),
    ('"thunder/tests/test_x.py" = "' + "0" * 64, "is no module of thunder outside its tests"),
    ("same-files", "differ in no file both list"),
])
def test_manifest_the_engine_cannot_decide_by_is_rejected(tmp_path, damage, match):
    text = (PATCHES / "manifest.toml").read_text()
    base = BASES[0]
    if damage == "same-files":  # a second base with the first one's files: bytes would match both
        other = BASES[1]
        text = manifest.with_files(text, other.name, base.files)
    else:
        text = text.replace(f'"{JIT_EXT}" = "{base.files[JIT_EXT]}', damage, 1)
    (tmp_path / "manifest.toml").write_text(text)
    with pytest.raises(ValueError, match=match):
        manifest.load(tmp_path)


def test_installed_files_match_their_manifest_entry_and_series_applies():
    base = installed_base()
    assert base is not None, "the thunder under test is a base of the manifest"
    for path, sha256 in base.files.items():
        text = installed_file(path).read_bytes()
        assert hashlib.sha256(text).hexdigest() == sha256
        patched = apply_series(text.decode(), read_series(base.directory), path)
        assert patched != text.decode()
        compile(patched, path, "exec")


def test_hunk_applies_with_an_offset_but_not_with_changed_context():
    text = installed_file(JIT_EXT).read_text()
    patches = read_series(installed_base().directory)
    shifted = "# one\n# two\n# three\n" + text
    assert apply_series(shifted, patches, JIT_EXT).startswith("# one\n")

    target = patches[0].diff_of(JIT_EXT).hunks[0].old_lines[0]
    altered = text.replace(target, target + "  # edited", 1)
    with pytest.raises(PatchApplyError) as info:
        apply_series(altered, patches, JIT_EXT)
    err = info.value
    assert err.hunk == 1 and err.patch.endswith(".patch")
    assert err.expected == target and err.actual == target + "  # edited"
    assert f"hunk #1 does not apply at line {err.line}" in str(err)


def test_hunk_whose_context_occurs_twice_in_its_window_is_refused():
    # The first hunk of the series, its context copied 30 lines below the original: both places match.
    text = installed_file(JIT_EXT).read_text()
    patches = read_series(installed_base().directory)
    hunk = patches[0].diff_of(JIT_EXT).hunks[0]
    lines = text.splitlines(keepends=True)
    at = next(i for i in range(len(lines)) if [x.rstrip("\n") for x in lines[i : i + len(hunk.old_lines)]] == hunk.old_lines)
    copy = [line + "\n" for line in hunk.old_lines]
    doubled = "".join(lines[: at + 30] + copy + lines[at + 30 :])
    with pytest.raises(AmbiguousHunkError) as info:
        apply_series(doubled, patches, JIT_EXT)
    err = info.value
    assert err.patch == patches[0].name and err.hunk == 1 and err.lines == [at + 1, at + 31]
    assert str(err) == (
        f"{patches[0].name}: hunk #1 is ambiguous: its context occurs at lines {at + 1} and {at + 31}, both within "
        f"200 lines of line {err.line} where its header puts it; not applied"
    )
    # The same copy beyond the window is no candidate: the hunk applies where its header puts it.
    far = "".join(lines[: at + 400] + copy + lines[at + 400 :])
    assert apply_series(far, patches, JIT_EXT) is not None


def test_small_hunk_with_repeated_context_names_both_lines():
    patch = parse_patch("--- a/thunder/m.py\n+++ b/thunder/m.py\n@@ -2,2 +2,3 @@\n x = 1\n+z = 3\n y = 2\n", "m.patch")
    with pytest.raises(AmbiguousHunkError, match=r"m.patch: hunk #1 is ambiguous: its context occurs at lines 2 and 5"):
        apply_series("a\nx = 1\ny = 2\nb\nx = 1\ny = 2\nc\n", [patch], "thunder/m.py")
    assert apply_series("a\nx = 1\ny = 2\nb\n", [patch], "thunder/m.py") == "a\nx = 1\nz = 3\ny = 2\nb\n"


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
        apply_series("a\n", [patch], JIT_EXT)


def test_only_the_target_file_of_a_patch_is_applied():
    text = (
        "Subject: [PATCH] x\n---\n"
        "diff --git a/thunder/core/jit_ext.py b/thunder/core/jit_ext.py\nindex 1..2 100644\n"
        "--- a/thunder/core/jit_ext.py\n+++ b/thunder/core/jit_ext.py\n@@ -1,2 +1,2 @@\n a\n-b\n+c\n"
        "diff --git a/thunder/tests/test_x.py b/thunder/tests/test_x.py\nindex 3..4 100644\n"
        "--- a/thunder/tests/test_x.py\n+++ b/thunder/tests/test_x.py\n@@ -1 +1,2 @@\n z\n+def test_y(): ...\n"
    )
    patch = parse_patch(text, "two.patch")
    assert [f.path for f in patch.files] == [JIT_EXT, "thunder/tests/test_x.py"] and patch.patched_paths() == [JIT_EXT]
    assert apply_series("a\nb\n", [patch], JIT_EXT) == "a\nc\n"
    assert patch.files[1].text == text[text.index("diff --git a/thunder/tests"):]
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
