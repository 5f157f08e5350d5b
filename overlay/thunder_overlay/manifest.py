"""Which patch series belongs to which upstream thunder/core/jit_ext.py.

``patches/manifest.toml`` lists one ``[[base]]`` per distinct upstream file: the thunder releases that
ship it, its sha256, and the series directory beside the manifest. A file is patched only when both its
release and its hash are listed together.
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass
from pathlib import Path

PATCHES_DIR = Path(__file__).parent / "patches"
TARGET_PATH = "thunder/core/jit_ext.py"


@dataclass(frozen=True)
class Base:
    releases: tuple[str, ...]
    sha256: str
    directory: Path


def load(patches_dir: Path = PATCHES_DIR) -> list[Base]:
    with open(patches_dir / "manifest.toml", "rb") as f:
        data = tomllib.load(f)
    return [
        Base(tuple(entry["releases"]), entry["sha256"].lower(), patches_dir / entry["dir"])
        for entry in data["base"]
    ]


def supported_releases(bases: list[Base]) -> list[str]:
    return sorted({r for b in bases for r in b.releases}, key=lambda v: tuple(int(x) for x in v.split(".")))


def base_for(bases: list[Base], release: str) -> Base | None:
    return next((b for b in bases if release in b.releases), None)
