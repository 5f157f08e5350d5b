"""A scratch series for tests and benchmarks: the installed thunder's series plus one patch that changes more
of thunder's files, in a copy of patches/ to use as THUNDER_OVERLAY_PATCHES (never written into patches/).

    build(destination, ["thunder/core/interpreter.py", "thunder/transforms/autodiff.py"])

The extra patch appends ``MARK`` to each file (so a test sees which modules run patched), and the manifest
copy lists each file's installed sha256 for the installed base. ``broken=PATH`` alters a context line of
that file's hunk, so that the patch applies to every file but that one.
"""

from __future__ import annotations

import difflib
import importlib.util
import shutil
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "overlay"))
from thunder_overlay import config, manifest  # noqa: E402

MARK = "_patched_by_the_scratch_series = True"
PATCH_NAME = "0099-scratch-mark-more-files-of-thunder-as-patched.patch"


def installed_root() -> Path:
    """The folder holding the importable thunder package (site-packages, a --target folder, a source tree)."""
    return Path(importlib.util.find_spec("thunder").origin).parents[1]


def installed_base(root: Path, bases: list[manifest.Base]) -> manifest.Base:
    base = manifest.base_for_files(bases, manifest.hashes_under(root, manifest.target_paths(bases)))
    if base is None:
        raise SystemExit(f"the thunder in {root} is no base of the manifest")
    return base


def appending_patch(root: Path, paths: list[str], broken: str | None = None) -> str:
    """A git format-patch mail that appends MARK to each of ``paths`` (as they are under ``root``)."""
    diffs = []
    for path in paths:
        old = (root / path).read_text(encoding="utf-8").splitlines(keepends=True)
        new = [*old, f"{MARK}\n"]
        diff = list(difflib.unified_diff(old, new, f"a/{path}", f"b/{path}", n=3))
        if path == broken:
            first_context = next(i for i, line in enumerate(diff) if line.startswith(" "))
            diff[first_context] = diff[first_context].rstrip("\n") + "  # a line this thunder does not have\n"
        diffs.append(f"diff --git a/{path} b/{path}\n" + "".join(diff))
    return (
        "From 0000000000000000000000000000000000000000 Mon Sep 17 00:00:00 2001\n"
        "From: thunder-overlay tests <tests@invalid>\n"
        f"Subject: [PATCH] scratch: mark {', '.join(paths)} as patched\n\n"
        "Description: a scratch patch the tests and benchmarks add to a series\n"
        "---\n" + "".join(diffs)
    )


def build(destination: Path, paths: list[str], broken: str | None = None, root: Path | None = None) -> Path:
    """A copy of patches/ in ``destination`` whose base of the installed thunder also changes ``paths``."""
    root = root or installed_root()
    shutil.copytree(config.patches_dir()[0], destination, ignore=shutil.ignore_patterns("__pycache__"))
    base = installed_base(root, manifest.load(destination))
    series = base.directory / "series"
    (base.directory / PATCH_NAME).write_text(appending_patch(root, paths, broken), encoding="utf-8")
    series.write_text(series.read_text() + PATCH_NAME + "\n")
    files = {**base.files, **manifest.hashes_under(root, paths)}
    text = (destination / config.MANIFEST).read_text()
    (destination / config.MANIFEST).write_text(manifest.with_files(text, base.name, files))
    return destination
