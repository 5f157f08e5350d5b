"""A per-user bytecode cache for the patched ``thunder.core.jit_ext``.

Parsing and applying the series and compiling the result costs about 30 ms; unmarshalling a cached code
object costs what stock thunder's ``.pyc`` does. An entry holds its key, a few facts for ``status``, the
patched text (for linecache and ``inspect``) and the marshalled code. It is used only when its stored key
equals the key computed now, from: the Python cache tag, importlib's MAGIC_NUMBER and the optimisation
level; the module's origin path (the code embeds it); the upstream file's sha256; the bytes of the
manifest and of every file in the series directory; THUNDER_OVERLAY_BASE; the overlay's version and the
size and modification time of its patching and compiling modules.

One entry per origin path and interpreter (a new key overwrites the old entry). Entries are written
atomically (a ``mkstemp`` file in the cache folder, then ``os.replace``), never under
``sys.dont_write_bytecode`` (``PYTHONDONTWRITEBYTECODE``, ``-B``), and a missing, unreadable, read-only,
corrupt or foreign entry or folder is ignored: the overlay then patches as if there were no cache.
Without a cache folder (no THUNDER_OVERLAY_CACHE_DIR, XDG_CACHE_HOME or home directory: a container
running an arbitrary uid) the cache is off.
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
FORMAT = b"thunder-overlay bytecode cache 1\n"


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


NO_CACHE_DIR = f"off (no cache folder: set {DIR_ENV}, XDG_CACHE_HOME or HOME)"


def entry_path(origin: str) -> Path | None:
    folder = cache_dir()
    if folder is None:
        return None
    tag = sys.implementation.cache_tag or "python"
    name = hashlib.sha256(f"{origin}\0{tag}\0{sys.flags.optimize}".encode()).hexdigest()[:24]
    return folder / f"jit_ext-{tag}-{name}.bin"


def _read_bytes(path: str) -> bytes:
    with open(path, "rb") as f:
        return f.read()


def _digest_dir(directory: Path) -> str:
    """sha256 over the names and bytes of every file in ``directory`` (os.scandir, not pathlib: this runs
    on every patched import)."""
    digest = hashlib.sha256()
    with os.scandir(directory) as scan:
        files = sorted((e.name, e.path) for e in scan if e.is_file())
    for name, path in files:
        digest.update(name.encode() + b"\0" + _read_bytes(path) + b"\0")
    return digest.hexdigest()


# The overlay's own modules that decide what the cached code and facts are (which file is which base, how
# patches apply, how the code is compiled, which switches count): an edited engine in a development install
# must not reuse code made by the old one. Their size and modification time identify them, as they identify
# a source file for its .pyc. tests/test_bytecode_cache.py checks that every module loaded while patching
# is listed.
ENGINE_FILES = ("config.py", "_startup.py", "engine.py", "manifest.py", "patchset.py", "bytecode_cache.py")


def _engine_stamp() -> list:
    package = os.path.dirname(__file__)
    stamp = []
    for name in ENGINE_FILES:
        try:
            st = os.stat(os.path.join(package, name))
            stamp.append([name, st.st_size, st.st_mtime_ns])
        except OSError:
            stamp.append([name, None, None])
    return stamp


def make_key(origin: str, base_sha256: str, patches_dir: Path, series_dir: Path, base_switch: str | None) -> dict:
    """Raises OSError when the manifest or the series directory cannot be read."""
    return {
        "python": sys.implementation.cache_tag,
        "magic": MAGIC_NUMBER.hex(),
        "optimize": sys.flags.optimize,
        "origin": origin,
        "base_sha256": base_sha256,
        "patches_dir": str(patches_dir),
        "manifest_sha256": hashlib.sha256(_read_bytes(os.path.join(patches_dir, config.MANIFEST))).hexdigest(),
        "series_dir": str(series_dir),
        "series_sha256": _digest_dir(series_dir),
        "base_switch": base_switch,
        "overlay": config.__version__,
        "engine": _engine_stamp(),
    }


class Entry:
    def __init__(self, key: dict, facts: dict, text: str, code):
        self.key, self.facts, self.text, self.code = key, facts, text, code


def _read(path: Path) -> bytes:
    """The entry's bytes; one that another user (but root) wrote is not trusted: it would run as ours."""
    with open(path, "rb") as f:
        if hasattr(os, "getuid") and os.fstat(f.fileno()).st_uid not in (os.getuid(), 0):
            raise ValueError("the entry belongs to another user")
        return f.read()


def _chunks(data: bytes, count: int) -> list[bytes]:
    """``count`` length-prefixed chunks after the format line; raises ValueError on anything else."""
    if not data.startswith(FORMAT):
        raise ValueError("not a thunder-overlay cache entry (or another format version)")
    at, chunks = len(FORMAT), []
    for _ in range(count):
        size = int.from_bytes(data[at : at + 8], "little")
        if at + 8 + size > len(data):
            raise ValueError("truncated entry")
        chunks.append(data[at + 8 : at + 8 + size])
        at += 8 + size
    if at != len(data):
        raise ValueError("trailing bytes")
    return chunks


def read(path: Path) -> Entry:
    """The entry at ``path``; raises OSError (missing, unreadable) or ValueError (corrupt, foreign)."""
    header, text, code = _chunks(_read(path), 3)
    try:
        meta = json.loads(header)
        return Entry(meta["key"], meta["facts"], text.decode("utf-8"), marshal.loads(code))
    except (KeyError, TypeError, EOFError, UnicodeDecodeError) as e:
        raise ValueError(f"corrupt entry: {type(e).__name__}: {e}") from None


def write(origin: str, entry: Entry) -> str:
    """Write ``entry`` for ``origin`` atomically; returns what happened, for status. Never raises."""
    if sys.dont_write_bytecode:
        return "not written (sys.dont_write_bytecode: PYTHONDONTWRITEBYTECODE or -B)"
    path = entry_path(origin)
    if path is None:
        return NO_CACHE_DIR
    header = json.dumps({"key": entry.key, "facts": entry.facts}, sort_keys=True).encode()
    chunks = [header, entry.text.encode("utf-8"), marshal.dumps(entry.code)]
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
