"""How the thunder being imported is installed, and which release its metadata names.

Only messages and ``status`` use this: the file's sha256 decides what is patched. Run lazily (for a
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
RECORD_ENTRY = "thunder/core/jit_ext.py"


@dataclass
class Install:
    description: str  # e.g. "wheel (lightning_thunder-0.2.6.dist-info)"
    release: str | None  # the version the metadata names, if any
    record_matches: bool | None = None  # the dist-info's RECORD lists these very bytes (None: no RECORD entry)


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


def _record_hash(dist_info: Path) -> str | None:
    """The sha256 the dist-info's RECORD lists for jit_ext.py (urlsafe base64, unpadded), if any."""
    try:
        for line in (dist_info / "RECORD").read_text(encoding="utf-8").splitlines():
            path, _, rest = line.partition(",")
            if path == RECORD_ENTRY and rest.startswith("sha256="):
                return rest[len("sha256="):].split(",")[0]
    except OSError:
        pass
    return None


def _b64(sha256_hex: str) -> str:
    return base64.urlsafe_b64encode(bytes.fromhex(sha256_hex)).rstrip(b"=").decode()


def _wheel_install(beside: list[Path], sha256_hex: str | None) -> Install:
    """One or more lightning_thunder-*.dist-info beside thunder/: the one whose RECORD lists these bytes
    names the release; any other is a leftover of an earlier install."""
    wanted = _b64(sha256_hex) if sha256_hex else None
    matching = [d for d in beside if wanted and _record_hash(d) == wanted]
    chosen = matching[0] if len(matching) == 1 else (beside[0] if len(beside) == 1 else None)
    if chosen is None:
        names = ", ".join(d.name for d in beside)
        return Install(f"wheel ({len(beside)} dist-info folders beside thunder/, none lists this file's hash: {names})",
                       None)
    others = [d.name for d in beside if d != chosen]
    recorded = _record_hash(chosen)
    description = f"wheel ({chosen.name}"
    if others:
        description += f"; also {', '.join(others)} beside it, left over from another install"
    elif wanted and recorded not in (None, wanted):
        description += "; its RECORD lists another hash for jit_ext.py: the file was changed after installation"
    matches = None if recorded is None or not wanted else recorded == wanted
    return Install(description + ")", _headers_version(chosen / "METADATA"), matches)


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


def describe(jit_ext_file: Path, sha256_hex: str | None) -> Install:
    thunder_dir = jit_ext_file.parents[1]
    root = thunder_dir.parent
    beside = sorted(root.glob(DIST_GLOB))
    if beside:
        return _wheel_install(beside, sha256_hex)
    if (root / EGG_INFO).is_dir():
        return Install(f"source tree with {EGG_INFO} (setup.py develop or an older editable install)",
                       _headers_version(root / EGG_INFO / "PKG-INFO"))
    try:
        found = _editable_or_elsewhere(thunder_dir)
    except Exception as e:  # a broken distribution elsewhere must not hide the answer for this tree
        found = Install(f"source tree (no distribution metadata beside it; looking elsewhere failed: {e!r})", None)
    return found or Install("source tree (no distribution metadata)", None)
