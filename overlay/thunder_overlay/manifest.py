"""Which patch series belongs to which upstream thunder.

``patches/manifest.toml`` lists one ``[[base]]`` per distinct upstream thunder: the releases that ship it
(used to name it in messages), the series directory beside the manifest, and in ``[base.files]`` the
sha256 of every file of thunder that the series changes (its test modules aside). A thunder is a base
when every one of those files has the listed bytes, so a source tree, an editable install or a ``+local``
version patch as long as the bytes are a known base. Any two bases differ in a file both list: bytes
never match two bases.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from thunder_overlay import config


class Base:
    """One upstream thunder: the releases that ship it, {file: sha256} of every file its series changes,
    its series directory. (A plain class: a dataclass costs about a millisecond to create, on every
    patched import.)"""

    __slots__ = ("releases", "files", "directory")

    def __init__(self, releases: tuple[str, ...], files: dict[str, str], directory: Path):
        self.releases, self.files, self.directory = releases, files, directory

    def __repr__(self) -> str:
        return f"Base(releases={self.releases!r}, files={self.files!r}, directory={self.directory!r})"

    @property
    def name(self) -> str:
        """The series name, as THUNDER_OVERLAY_BASE takes it: the series directory's name."""
        return self.directory.name

    def matches(self, hashes: dict[str, str | None]) -> bool:
        return all(hashes.get(path) == sha256 for path, sha256 in self.files.items())


def _checked_files(entry: dict, where: str) -> dict[str, str]:
    files = entry.get("files")
    if not isinstance(files, dict) or not files:
        raise ValueError(f"{where}: [base.files] lists no file")
    for path, sha256 in files.items():
        if not re.fullmatch(r"thunder/[\w/]+\.py", path) or path.startswith("thunder/tests/"):
            raise ValueError(f"{where}: {path!r} is no module of thunder outside its tests")
        if not re.fullmatch(r"[0-9a-f]{64}", str(sha256).lower()):
            raise ValueError(f"{where}: the sha256 of {path} is not 64 hex digits")
    return {path: sha256.lower() for path, sha256 in files.items()}


def load(patches_dir: Path | None = None, *, new_bases: bool = False) -> list[Base]:
    """The bases of ``patches_dir``, by default the one the overlay uses (``config.patches_dir()``).
    Raises ValueError for a manifest the engine cannot decide by. ``new_bases`` (tools/series.py only): a
    base without ``[base.files]`` yet, whose series ``export`` is about to write, is listed with no files."""
    patches_dir = Path(patches_dir or config.patches_dir()[0])
    try:
        import tomllib
    except ModuleNotFoundError:  # Python 3.10
        import tomli as tomllib

    with open(patches_dir / config.MANIFEST, "rb") as f:
        data = tomllib.load(f)
    bases = []
    for entry in data["base"]:
        where = f"{patches_dir / config.MANIFEST}, base {entry.get('dir')!r}"
        files = {} if new_bases and "files" not in entry else _checked_files(entry, where)
        bases.append(Base(tuple(entry["releases"]), files, patches_dir / entry["dir"]))
    finished = [b for b in bases if b.files]
    for i, a in enumerate(finished):
        for b in finished[i + 1 :]:
            if not any(a.files[p] != b.files[p] for p in a.files.keys() & b.files.keys()):
                raise ValueError(f"{patches_dir / config.MANIFEST}: bases {a.name} and {b.name} differ in no file "
                                 "both list, so the same thunder could match both")
    return bases


def target_paths(bases: list[Base]) -> list[str]:
    """Every file some series changes, in manifest order."""
    return list(dict.fromkeys(path for b in bases for path in b.files))


def hashes_under(root: Path, paths: list[str]) -> dict[str, str | None]:
    """{path: sha256} of each file under ``root`` (a folder holding ``thunder/``); None for a missing one.
    For tools and tests: the engine finds each file as the import system would."""
    import hashlib

    return {p: hashlib.sha256((root / p).read_bytes()).hexdigest() if (root / p).is_file() else None for p in paths}


_VERSION = re.compile(r"(\d+(?:\.\d+)*)(?:\.dev(\d+))?")


def release_key(release: str) -> tuple:
    """Sorts release names as pip orders versions (0.2.6 < 0.2.7.dev0 < 0.2.7.dev20260201 < 0.2.7), and any
    other name (main@1e22aacb1) after every version."""
    m = _VERSION.fullmatch(release)
    if m is None:
        return (1, (), (), release)
    dev = (0, int(m.group(2))) if m.group(2) is not None else (1, 0)
    return (0, tuple(int(x) for x in m.group(1).split(".")), dev, "")


def supported_releases(bases: list[Base]) -> list[str]:
    return sorted({r for b in bases for r in b.releases}, key=release_key)


def base_for(bases: list[Base], release: str) -> Base | None:
    """The base a release ships (used for messages: the release never decides what is patched)."""
    return next((b for b in bases if release in b.releases), None)


def base_for_files(bases: list[Base], hashes: dict[str, str | None]) -> Base | None:
    """The base whose every file has the sha256 ``hashes`` gives (None: a missing file)."""
    return next((b for b in bases if b.matches(hashes)), None)


def series_by_name(bases: list[Base], name: str) -> Base | None:
    """The series THUNDER_OVERLAY_BASE names: a series directory or any release it lists."""
    return next((b for b in bases if name == b.name), None) or base_for(bases, name)


def series_names(bases: list[Base]) -> str:
    """'0.2.1 (releases 0.2.1, 0.2.2), 0.2.3, ...' for messages."""
    names = []
    for b in sorted(bases, key=lambda b: release_key(b.name)):
        others = [r for r in b.releases if r != b.name]
        names.append(f"{b.name} (releases {', '.join(b.releases)})" if others else b.name)
    return ", ".join(names)


def without_base(text: str, series: str) -> str:
    """The manifest ``text`` without the base whose dir is ``series``. For the tools that derive a series."""
    blocks = re.split(r"(?m)^(?=\[\[base\]\]\s*$)", text)
    kept = [b for b in blocks if not re.search(rf'(?m)^dir = "{re.escape(series)}"\s*$', b)]
    if len(kept) == len(blocks):
        raise ValueError(f"the manifest has no base with dir = {series!r}")
    return "".join(kept)


def with_files(text: str, series: str, files: dict[str, str]) -> str:
    """The manifest ``text`` with the ``[base.files]`` of the base whose dir is ``series`` set to ``files``
    ({path: sha256}); comments and every other line kept. For the tools that write series."""
    blocks = re.split(r"(?m)^(?=\[\[base\]\]\s*$)", text)
    for i, block in enumerate(blocks):
        if re.search(rf'(?m)^dir = "{re.escape(series)}"\s*$', block):
            table = "[base.files]\n" + "".join(f'"{p}" = "{h}"\n' for p, h in files.items())
            kept = re.sub(r'(?ms)^\[base\.files\]\n(?:"[^"\n]+" = "[0-9a-f]+"\n)*', "", block)
            body, trailer = re.match(r"(?s)(.*?\n)((?:\n|#[^\n]*\n)*)$", kept).groups()
            blocks[i] = f"{body.rstrip()}\n\n{table}\n{trailer.lstrip(chr(10))}"
            return "".join(blocks).rstrip("\n") + "\n"
    raise ValueError(f"the manifest has no base with dir = {series!r}")


_unknown_bases: set = set()


def base_switch(patches: str) -> str | None:
    """THUNDER_OVERLAY_BASE (None: unset). A value that names no series of ``patches`` (a series folder or a
    release the manifest lists) warns once per process: without the warning it would be taken silently when
    thunder is a known base. Only a set variable costs anything (a stat; the manifest for a release name)."""
    value = os.environ.get(config.BASE_ENV, "").strip() or None
    if value is None or value in _unknown_bases or os.path.isfile(os.path.join(patches, value, "series")):
        return value
    try:
        bases = load(patches)
    except Exception:  # a manifest that cannot be read: the decision refuses and says why
        return value
    if series_by_name(bases, value) is None:
        _unknown_bases.add(value)
        config.warn(config.unknown_value(config.BASE_ENV, os.environ.get(config.BASE_ENV), series_names(bases),
                                         "It names no patch series: only the files of a known base are patched."))
    return value
