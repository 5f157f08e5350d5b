"""How the thunder being imported is installed, and which release its metadata names.

Only messages and ``status`` use this: the sha256 of the files decides what is patched. Run lazily (for a
report or a refusal message), never on the import path of a patched thunder.
"""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import unquote, urlparse

DIST_GLOB = "lightning_thunder-*.dist-info"
EGG_INFO = "lightning_thunder.egg-info"


@dataclass
class Install:
    description: str  # e.g. "wheel (lightning_thunder-0.2.6.dist-info)"
    release: str | None  # the version the metadata names, if any
    edited: tuple[str, ...] = ()  # files whose bytes differ from the hash the dist-info's RECORD lists


def _headers_version(path: Path) -> str | None:
    """``Version:`` of a METADATA / PKG-INFO file (the headers end at the first blank line)."""
    try:
        for line in path.read_text(encoding="utf-8").splitlines():
            if line.startswith("Version:"):
                return line.split(":", 1)[1].strip()
            if not line:
                break
    except OSError:
        pass
    return None


def _record_hashes(dist_info: Path) -> dict[str, str]:
    """{path: sha256} of the dist-info's RECORD (urlsafe base64, unpadded), for every file it hashes."""
    hashes = {}
    try:
        for line in (dist_info / "RECORD").read_text(encoding="utf-8").splitlines():
            path, _, rest = line.partition(",")
            if rest.startswith("sha256="):
                hashes[path] = rest[len("sha256="):].split(",")[0]
    except OSError:
        pass
    return hashes


def _b64(sha256_hex: str) -> str:
    return base64.urlsafe_b64encode(bytes.fromhex(sha256_hex)).rstrip(b"=").decode()


def _wheel_install(beside: list[Path], hashes: dict[str, str]) -> Install:
    """One or more lightning_thunder-*.dist-info beside thunder/: the one whose RECORD lists these bytes
    names the release; any other is a leftover of an earlier install."""
    wanted = {path: _b64(sha256) for path, sha256 in hashes.items()}
    records = {d: _record_hashes(d) for d in beside}
    matching = [d for d in beside if wanted and all(records[d].get(p) == h for p, h in wanted.items())]
    chosen = matching[0] if len(matching) == 1 else (beside[0] if len(beside) == 1 else None)
    if chosen is None:
        names = ", ".join(d.name for d in beside)
        return Install(f"wheel ({len(beside)} dist-info folders beside thunder/, none lists these files' hashes: "
                       f"{names})", None)
    others = [d.name for d in beside if d != chosen]
    edited = tuple(p for p, h in wanted.items() if records[chosen].get(p) not in (None, h))
    description = f"wheel ({chosen.name}"
    if others:
        description += f"; also {', '.join(others)} beside it, left over from another install"
    elif edited:
        description += f"; its RECORD lists another hash for {', '.join(edited)}: changed after installation"
    return Install(description + ")", _headers_version(chosen / "METADATA"), edited)


def _editable_or_elsewhere(thunder_dir: Path) -> Install | None:
    """A lightning-thunder distribution elsewhere on sys.path: an editable install of this tree (its
    direct_url.json points here) or an unrelated one that this tree shadows."""
    import importlib.metadata

    others = []
    for dist in importlib.metadata.distributions(name="lightning-thunder"):
        try:
            direct_url = json.loads(dist.read_text("direct_url.json") or "{}")
        except ValueError:
            direct_url = {}
        url = direct_url.get("url", "")
        location = getattr(dist, "_path", None)
        if direct_url.get("dir_info", {}).get("editable") and url.startswith("file:"):
            source = Path(unquote(urlparse(url).path)).resolve()
            if source == thunder_dir.parent.resolve() or source in thunder_dir.resolve().parents:
                return Install(f"editable ({location.name if location else 'lightning-thunder'} in "
                               f"{location.parent if location else '?'}, source {source})", dist.version)
        others.append(f"{dist.version} at {location.parent if location else '?'}")
    if others:
        return Install("source tree (no distribution metadata beside it; it shadows lightning-thunder "
                       + ", ".join(others) + ")", None)
    return None


def describe(thunder_dir: Path, hashes: dict[str, str]) -> Install:
    """How the thunder package at ``thunder_dir`` is installed; ``hashes``: {path: sha256} of the files
    the overlay reads, checked against a wheel's RECORD."""
    root = thunder_dir.parent
    beside = sorted(root.glob(DIST_GLOB))
    if beside:
        return _wheel_install(beside, hashes)
    if (root / EGG_INFO).is_dir():
        return Install(f"source tree with {EGG_INFO} (setup.py develop or an older editable install)",
                       _headers_version(root / EGG_INFO / "PKG-INFO"))
    try:
        found = _editable_or_elsewhere(thunder_dir)
    except Exception as e:  # a broken distribution elsewhere must not hide the answer for this tree
        found = Install(f"source tree (no distribution metadata beside it; looking elsewhere failed: {e!r})", None)
    return found or Install("source tree (no distribution metadata)", None)
