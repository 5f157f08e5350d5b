"""A per-user bytecode cache of the patched thunder: one entry per thunder installation and interpreter.

Parsing and applying the series and compiling every patched file costs tens of milliseconds (compiling
0.2.6's ``interpreter.py`` alone about 64 ms); unmarshalling cached code objects costs what stock thunder's
``.pyc`` files do. An entry holds its key, the facts ``status`` reports, and per patched file its text
(for linecache and ``inspect``) and marshalled code. It is used only when its stored key equals the key
computed now, from: the Python cache tag, importlib's MAGIC_NUMBER and the optimisation level; thunder's
package path; the path and sha256 of every file of thunder the decision read (each found as the import
system would); THUNDER_OVERLAY_BASE; the overlay's version and the name, size and modification time of its
own files that decide the result: the manifest, every file of the series directory and the engine modules
(as a ``.pyc`` identifies its source; the overlay's files change with the overlay, thunder's are hashed).
An entry another user (but root) owns is never used.

The cache lives in the user's cache folder, outside any source tree, like pip's; so ``PYTHONDONTWRITEBYTECODE``
and ``-B``, which keep ``.pyc`` files from being written beside sources, do not apply to it.
THUNDER_OVERLAY_CACHE=0 turns it off (neither read nor written). Entries are written atomically (a
``mkstemp`` file in the cache folder, then ``os.replace``), and a missing, unreadable, read-only, corrupt
or foreign entry or folder is ignored: the overlay then patches as if there were no cache. Without a cache
folder (no THUNDER_OVERLAY_CACHE_DIR, XDG_CACHE_HOME or home directory: a container running an arbitrary
uid) the cache is off.
"""

from __future__ import annotations

import hashlib
import json
import marshal
import os
import sys
import tempfile
from importlib.util import MAGIC_NUMBER
from pathlib import Path

from thunder_overlay import config

DIR_ENV = "THUNDER_OVERLAY_CACHE_DIR"
SWITCH_ENV = "THUNDER_OVERLAY_CACHE"
FORMAT = b"thunder-overlay bytecode cache 2\n"
NO_CACHE_DIR = f"off (no cache folder: set {DIR_ENV}, XDG_CACHE_HOME or HOME)"


def switched_off() -> bool:
    return config.MODES.get(os.environ.get(SWITCH_ENV, "").strip().lower()) == "off"


def cache_dir() -> Path | None:
    """The cache folder; None when there is none to use (no home directory and no variable names one)."""
    override = os.environ.get(DIR_ENV)
    if override:
        return Path(override)
    xdg = os.environ.get("XDG_CACHE_HOME")
    if xdg and os.path.isabs(xdg):
        return Path(xdg) / "thunder-overlay"
    try:
        home = Path.home()
    except (RuntimeError, KeyError, OSError):  # HOME unset and no passwd entry for this uid
        return None
    return home / ".cache" / "thunder-overlay"


def entry_path(thunder_path: str) -> Path | None:
    """Where the entry for the thunder package at ``thunder_path`` lives; None when the cache is off."""
    folder = None if switched_off() else cache_dir()
    if folder is None:
        return None
    tag = sys.implementation.cache_tag or "python"
    name = hashlib.sha256(f"{thunder_path}\0{tag}\0{sys.flags.optimize}".encode()).hexdigest()[:24]
    return folder / f"thunder-{tag}-{name}.bin"


# The overlay's own modules that decide what the cached code and facts are (which files are which base, how
# they are found, how patches apply, how the code is compiled, which switches count): an edited engine in a
# development install must not reuse code made by the old one. tests/test_bytecode_cache.py checks that every
# module loaded while patching is listed.
ENGINE_FILES = ("config.py", "_startup.py", "engine.py", "locate.py", "manifest.py", "patching.py", "patchset.py",
                "bytecode_cache.py")


def _stamp(folder: str, names) -> list:
    """[name, size, modification time] of each file (None, None: missing)."""
    stamp = []
    for name in names:
        try:
            st = os.stat(os.path.join(folder, name))
            stamp.append([name, st.st_size, st.st_mtime_ns])
        except OSError:
            stamp.append([name, None, None])
    return stamp


def make_key(thunder_path: str, files: list, patches_dir: Path, series_dir: Path, base_switch: str | None) -> dict:
    """``files``: [path, origin, sha256] of every file of thunder the decision read. Raises OSError when the
    series directory cannot be read."""
    with os.scandir(series_dir) as scan:  # os.scandir, not pathlib: this runs on every patched import
        series = sorted(e.name for e in scan if e.is_file())
    return {
        "python": sys.implementation.cache_tag,
        "magic": MAGIC_NUMBER.hex(),
        "optimize": sys.flags.optimize,
        "thunder": thunder_path,
        "files": [list(f) for f in files],
        "base_switch": base_switch,
        "overlay": config.__version__,
        "patches_dir": str(patches_dir),
        "manifest": _stamp(str(patches_dir), [config.MANIFEST]),
        "series_dir": str(series_dir),
        "series": _stamp(str(series_dir), series),
        "engine": _stamp(os.path.dirname(__file__), ENGINE_FILES),
    }


# What an entry records besides texts and code: the fields of the engine's Plan that the key determines (and,
# per file, the sha256 its base lists: "base_sha256").
FACTS = ("state", "known", "base", "base_releases", "base_switch", "patches")


class Entry:
    """``files``: per patched file, [path, text (bytes, decoded when asked for), code object]."""

    def __init__(self, key: dict, facts: dict, files: list):
        self.key, self.facts, self.files = key, facts, files


def _read(path: Path) -> bytes:
    """The entry's bytes; one that another user (but root) wrote is not trusted: it would run as ours."""
    with open(path, "rb") as f:
        if hasattr(os, "getuid") and os.fstat(f.fileno()).st_uid not in (os.getuid(), 0):
            raise ValueError("the entry belongs to another user")
        return f.read()


def _chunks(data: bytes) -> list[bytes]:
    """The length-prefixed chunks after the format line; raises ValueError on anything else."""
    if not data.startswith(FORMAT):
        raise ValueError("not a thunder-overlay cache entry (or another format version)")
    at, chunks = len(FORMAT), []
    while at < len(data):
        size = int.from_bytes(data[at : at + 8], "little")
        if at + 8 + size > len(data):
            raise ValueError("truncated entry")
        chunks.append(data[at + 8 : at + 8 + size])
        at += 8 + size
    return chunks


def read(path: Path) -> Entry:
    """The entry at ``path``; raises OSError (missing, unreadable) or ValueError (corrupt, foreign)."""
    chunks = _chunks(_read(path))
    try:
        meta = json.loads(chunks[0])
        paths = meta["paths"]
        if len(chunks) != 1 + 2 * len(paths):
            raise ValueError(f"{len(chunks)} chunks for {len(paths)} files")
        files = [[p, chunks[1 + 2 * i], marshal.loads(chunks[2 + 2 * i])] for i, p in enumerate(paths)]
        return Entry(meta["key"], meta["facts"], files)
    except (IndexError, KeyError, TypeError, EOFError, UnicodeDecodeError) as e:
        raise ValueError(f"corrupt entry: {type(e).__name__}: {e}") from None


def write(thunder_path: str, entry: Entry) -> str:
    """Write ``entry`` atomically; returns what happened, for status. Never raises."""
    if switched_off():
        return f"off ({SWITCH_ENV}={os.environ[SWITCH_ENV]})"
    path = entry_path(thunder_path)
    if path is None:
        return NO_CACHE_DIR
    header = json.dumps({"key": entry.key, "facts": entry.facts, "paths": [f[0] for f in entry.files]},
                        sort_keys=True).encode()
    chunks = [header]
    for _, text, code in entry.files:
        chunks += [text.encode("utf-8"), marshal.dumps(code)]
    data = FORMAT + b"".join(len(c).to_bytes(8, "little") + c for c in chunks)
    try:
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        # a unique name: a file left by a killed writer never blocks a later one (containers reuse pids)
        fd, temporary = tempfile.mkstemp(prefix=f"{path.name}.", suffix=".tmp", dir=path.parent)
        try:
            with open(fd, "wb") as f:
                f.write(data)
            os.replace(temporary, path)
        except BaseException:
            os.unlink(temporary)
            raise
    except OSError as e:
        return f"not written ({type(e).__name__}: {e})"
    return f"written: {path}"
