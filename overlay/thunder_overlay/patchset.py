"""Quilt-style patch series: parse git unified diffs and apply them in memory.

A series directory holds a ``series`` file (one patch file name per line, ``#`` comments) and the
patches it names. Each patch is a ``git format-patch`` mail: a header (subject and DEP-3 fields), then
the diffs of the files it changes (thunder's modules and the tests upstream would merge with them).
The overlay applies the diffs of every file outside ``thunder/tests/``, one file at a time. Hunks apply
with exact context; a hunk may sit a bounded number of lines away from where its header says (an offset,
never fuzz), and only where its context occurs once within that window. A mismatch raises
:class:`PatchApplyError` naming the patch, the hunk, the line and the expected against the actual text;
context found twice raises :class:`AmbiguousHunkError` naming both lines.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

MAX_OFFSET = 200
_GIT_DIFF_LINES = ("diff --git ", "index ", "similarity ", "new file mode")
_HUNK_HEADER = re.compile(r"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")


class PatchError(Exception):
    """A patch or series that cannot be read."""


class PatchApplyError(PatchError):
    """A hunk whose context is not in the text being patched."""

    def __init__(self, patch: str, hunk: int, line: int, expected: str, actual: str | None):
        self.patch, self.hunk, self.line, self.expected, self.actual = patch, hunk, line, expected, actual
        got = "end of file" if actual is None else repr(actual)
        super().__init__(f"{patch}: hunk #{hunk} does not apply at line {line}: expected {expected!r}, found {got}")


class AmbiguousHunkError(PatchApplyError):
    """A hunk whose context occurs more than once within its offset window: where it belongs is a guess."""

    def __init__(self, patch: str, hunk: int, lines: list[int], wanted: int):
        self.patch, self.hunk, self.lines, self.line = patch, hunk, lines, wanted
        self.expected = self.actual = None
        PatchError.__init__(
            self,
            f"{patch}: hunk #{hunk} is ambiguous: its context occurs at lines {lines[0]} and {lines[1]}, both within "
            f"{MAX_OFFSET} lines of line {wanted} where its header puts it; not applied",
        )


@dataclass
class Hunk:
    old_start: int
    old_lines: list[str] = field(default_factory=list)  # context and removed lines, without newlines
    new_lines: list[str] = field(default_factory=list)  # context and added lines


@dataclass
class FileDiff:
    path: str  # relative to the repository root, like thunder/core/jit_ext.py
    hunks: list[Hunk]
    text: str = ""  # the diff as the patch file has it, from its ``diff --git`` (or ``---``) line


def is_test_path(path: str) -> bool:
    """Test modules upstream merges with a fix; ``git am`` applies them, the overlay does not."""
    return path.startswith("thunder/tests/")


@dataclass
class Patch:
    name: str
    header: str
    files: list[FileDiff]

    def diff_of(self, path: str) -> FileDiff | None:
        return next((f for f in self.files if f.path == path), None)

    def patched_paths(self) -> list[str]:
        """The files of thunder this patch changes that the overlay applies: every one but the tests."""
        return [f.path for f in self.files if not is_test_path(f.path)]

    def header_fields(self) -> dict[str, str]:
        """DEP-3 style ``Field: value`` lines of the header (continuation lines joined)."""
        fields: dict[str, str] = {}
        key = None
        for line in self.header.splitlines():
            match = re.match(r"^([A-Z][A-Za-z-]*): ?(.*)$", line)
            if match:
                key = match.group(1)
                fields[key] = match.group(2).strip()
            elif key and line.startswith(" ") and line.strip():
                fields[key] += " " + line.strip()
            else:
                key = None
        return fields


def parse_patch(text: str, name: str) -> Patch:
    lines = text.splitlines()
    try:
        start = next(i for i, line in enumerate(lines) if line.startswith("--- "))
    except StopIteration:
        raise PatchError(f"{name}: no '--- ' line: not a unified diff (empty, truncated or corrupt?)") from None
    header_end = next((i for i in range(start) if lines[i] == "---" or lines[i].startswith("diff --git ")), start)
    files: list[FileDiff] = []
    i = start
    while i < len(lines):
        if lines[i].startswith("--- "):
            first = i  # the diff's text starts at its git lines (diff --git, index), where it has them
            while first > 0 and lines[first - 1].startswith(_GIT_DIFF_LINES):
                first -= 1
            diff, i = _parse_file_diff(lines, i, name)
            diff.text = "\n".join(lines[first:i]) + "\n"
            files.append(diff)
        elif lines[i].startswith("-- "):
            break  # the mail's signature
        elif lines[i].strip() and not lines[i].startswith(_GIT_DIFF_LINES):
            raise PatchError(f"{name}: unexpected text after the last hunk at line {i + 1}: {lines[i]!r}")
        else:
            i += 1
    if len({f.path for f in files}) != len(files):
        raise PatchError(f"{name}: changes a file in two places")
    return Patch(name=name, header="\n".join(lines[:header_end]), files=files)


def _parse_file_diff(lines: list[str], start: int, name: str) -> tuple[FileDiff, int]:
    if start + 1 >= len(lines) or not lines[start + 1].startswith("+++ "):
        raise PatchError(f"{name}: '--- ' line {start + 1} is not followed by a '+++ ' line")
    old_path = lines[start][4:].split("\t")[0].strip()
    new_path = lines[start + 1][4:].split("\t")[0].strip()
    path = new_path[2:] if new_path.startswith("b/") else new_path
    if (old_path[2:] if old_path.startswith("a/") else old_path) != path:
        raise PatchError(f"{name}: renames or creates a file ({old_path} -> {new_path}); only edits are supported")
    hunks: list[Hunk] = []
    i = start + 2
    while i < len(lines) and lines[i].startswith("@@"):
        match = _HUNK_HEADER.match(lines[i])
        if not match:
            raise PatchError(f"{name}: malformed hunk header at line {i + 1}: {lines[i]!r}")
        old_count = int(match.group(2) or 1)
        new_count = int(match.group(4) or 1)
        hunk = Hunk(old_start=int(match.group(1)))
        i += 1
        while len(hunk.old_lines) < old_count or len(hunk.new_lines) < new_count:
            if i >= len(lines):
                raise PatchError(f"{name}: hunk #{len(hunks) + 1} of {path} is truncated (file ends at line {i})")
            line = lines[i]
            tag, body = line[:1], line[1:]
            if tag == " " or line == "":
                hunk.old_lines.append(body)
                hunk.new_lines.append(body)
            elif tag == "-":
                hunk.old_lines.append(body)
            elif tag == "+":
                hunk.new_lines.append(body)
            elif tag != "\\":
                raise PatchError(f"{name}: hunk #{len(hunks) + 1} of {path} has a corrupt line {i + 1}: {line!r}")
            i += 1
        if len(hunk.old_lines) != old_count or len(hunk.new_lines) != new_count:
            raise PatchError(f"{name}: hunk #{len(hunks) + 1} of {path}: line counts do not match its header")
        hunks.append(hunk)
    if not hunks:
        raise PatchError(f"{name}: diff of {path} has no hunks")
    return FileDiff(path=path, hunks=hunks), i


def apply_diff(text: str, diff: FileDiff, patch_name: str) -> str:
    """Apply ``diff`` to ``text`` and return the new text; raises PatchApplyError on any mismatch."""
    lines = text.splitlines()
    shift = 0  # how far earlier hunks moved the lines below them
    for number, hunk in enumerate(diff.hunks, start=1):
        wanted = hunk.old_start - 1 + shift if hunk.old_lines else hunk.old_start + shift
        found = _locate(lines, hunk.old_lines, wanted)
        if not found:
            line, expected, actual = _first_mismatch(lines, hunk.old_lines, wanted)
            raise PatchApplyError(patch_name, number, line, expected, actual)
        if len(found) > 1:
            raise AmbiguousHunkError(patch_name, number, sorted(at + 1 for at in found[:2]), wanted + 1)
        at = found[0]
        lines[at : at + len(hunk.old_lines)] = hunk.new_lines
        shift += len(hunk.new_lines) - len(hunk.old_lines) + (at - wanted)
    return "\n".join(lines) + ("\n" if text.endswith("\n") else "")


def _locate(lines: list[str], old: list[str], wanted: int) -> list[int]:
    """Every place within the offset window where ``old`` matches exactly, nearest first."""
    if not old:
        return [wanted]  # a pure insertion has no context to search for
    found = []
    for delta in range(MAX_OFFSET + 1):
        for at in (wanted - delta, wanted + delta) if delta else (wanted,):
            if 0 <= at <= len(lines) - len(old) and lines[at] == old[0] and lines[at : at + len(old)] == old:
                found.append(at)
    return found


def _first_mismatch(lines: list[str], old: list[str], wanted: int) -> tuple[int, str, str | None]:
    for k, expected in enumerate(old):
        at = wanted + k
        actual = lines[at] if 0 <= at < len(lines) else None
        if actual != expected:
            return at + 1, expected, actual
    return wanted + 1, old[0] if old else "", None


def read_series(directory: Path) -> list[Patch]:
    """The patches a series directory lists, in order, parsed."""
    series = directory / "series"
    if not series.is_file():
        raise PatchError(f"{series}: no series file")
    names = [line.split("#")[0].strip() for line in series.read_text().splitlines()]
    names = [n for n in names if n]
    if len(set(names)) != len(names):
        raise PatchError(f"{series}: lists a patch more than once")
    patches = []
    for name in names:
        path = directory / name
        if not path.is_file():
            raise PatchError(f"{series}: lists {name}, which does not exist")
        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError as e:
            raise PatchError(f"{path}: not UTF-8 text ({e})") from None
        patches.append(parse_patch(text, str(path)))
    return patches


def apply_series(text: str, patches: list[Patch], path: str) -> str:
    """``text`` of the file ``path`` with the series applied: each patch's diff of that file, in order."""
    if not any(patch.diff_of(path) for patch in patches):
        raise PatchError(f"no patch of the series changes {path}")
    for patch in patches:
        diff = patch.diff_of(path)
        if diff is not None:
            text = apply_diff(text, diff, patch.name)
    return text
