"""Which patch series belongs to which upstream thunder/core/jit_ext.py.

``patches/manifest.toml`` lists one ``[[base]]`` per distinct upstream file: its sha256, the thunder
releases that ship it (used to name it in messages) and the series directory beside the manifest. The
file's sha256 alone decides the base, so a source tree, an editable install or a ``+local`` version
patch as long as the bytes are a known base.
"""

from __future__ import annotations

from pathlib import Path

from thunder_overlay import config

TARGET_PATH = "thunder/core/jit_ext.py"


class Base:
    """One upstream file: the releases that ship it, its sha256, its series directory. (A plain class: a
    dataclass costs about a millisecond to create, on every patched import.)"""

    __slots__ = ("releases", "sha256", "directory")

    def __init__(self, releases: tuple[str, ...], sha256: str, directory: Path):
        self.releases, self.sha256, self.directory = releases, sha256, directory

    def __repr__(self) -> str:
        return f"Base(releases={self.releases!r}, sha256={self.sha256!r}, directory={self.directory!r})"

    @property
    def name(self) -> str:
        """The series name, as THUNDER_OVERLAY_BASE takes it: the series directory's name."""
        return self.directory.name


def load(patches_dir: Path | None = None) -> list[Base]:
    """The bases of ``patches_dir``, by default the one the overlay uses (``config.patches_dir()``)."""
    patches_dir = Path(patches_dir or config.patches_dir()[0])
    try:
        import tomllib
    except ModuleNotFoundError:  # Python 3.10
        import tomli as tomllib

    with open(patches_dir / config.MANIFEST, "rb") as f:
        data = tomllib.load(f)
    return [
        Base(tuple(entry["releases"]), entry["sha256"].lower(), patches_dir / entry["dir"])
        for entry in data["base"]
    ]


def _release_key(release: str) -> tuple:
    return tuple((0, int(x), "") if x.isdigit() else (1, 0, x) for x in release.split("."))


def supported_releases(bases: list[Base]) -> list[str]:
    return sorted({r for b in bases for r in b.releases}, key=_release_key)


def base_for(bases: list[Base], release: str) -> Base | None:
    """The base a release ships (used for messages: the release never decides what is patched)."""
    return next((b for b in bases if release in b.releases), None)


def base_for_sha256(bases: list[Base], sha256: str) -> Base | None:
    return next((b for b in bases if b.sha256 == sha256), None)


def series_by_name(bases: list[Base], name: str) -> Base | None:
    """The series THUNDER_OVERLAY_BASE names: a series directory or any release it lists."""
    return next((b for b in bases if name == b.name), None) or base_for(bases, name)


def series_names(bases: list[Base]) -> str:
    """'0.2.1 (releases 0.2.1, 0.2.2), 0.2.3, ...' for messages."""
    names = []
    for b in sorted(bases, key=lambda b: _release_key(b.name)):
        others = [r for r in b.releases if r != b.name]
        names.append(f"{b.name} (releases {', '.join(b.releases)})" if others else b.name)
    return ", ".join(names)
