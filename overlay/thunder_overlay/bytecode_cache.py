"""A per-user bytecode cache of the patched thunder: one entry per thunder installation and interpreter.

Parsing and applying the series and compiling every patched file costs tens of milliseconds (compiling
0.2.6's ``interpreter.py`` alone about 64 ms); unmarshalling cached code objects costs what stock thunder's
``.pyc`` files do. An entry holds its key, the facts ``status`` reports, and per patched file its text
(for linecache and ``inspect``) and marshalled code. It is used only when its stored key equals the key
computed now, from: the Python cache tag, importlib's MAGIC_NUMBER and the optimisation level; thunder's
package path; the path, size, modification time and sha256 of every file of thunder the decision read
(each found as the import system would; as for a ``.pyc``, a file whose size and modification time are
those stored is not read again, any other is hashed); THUNDER_OVERLAY_BASE; the overlay's version and the
name, size and modification time of its own files that decide the result: the manifest, every file of the
series directory and the engine modules.

What is trusted: an entry is opened without following a link and without blocking, and read only when it
is a regular file that this user owns and no other user can write, in a folder that belongs to this user
(or root) and no other user can write (otherwise the cache is off, with one warning). Only the size the
entry announces is read; the header and each code chunk must have their stored sha256, and each code chunk
must hold a code object. An entry that fails any of this is not used and is replaced.

The cache lives in the user's cache folder, outside any source tree, like pip's; so ``PYTHONDONTWRITEBYTECODE``
and ``-B``, which keep ``.pyc`` files from being written beside sources, do not apply to it.
THUNDER_OVERLAY_CACHE=0 turns it off (neither read nor written). Entries are written atomically (a
``mkstemp`` file in the cache folder, then ``os.replace``); a write removes temporary files older than a day
that killed writers left. A missing, unreadable, read-only or corrupt entry or folder is ignored: the
overlay then patches as if there were no cache. Without a cache folder (no THUNDER_OVERLAY_CACHE_DIR,
XDG_CACHE_HOME or home directory: a container running an arbitrary uid) the cache is off.
"""

from __future__ import annotations

import hashlib
import json
import marshal
import os
import stat
import sys
import time
import types
from importlib.util import MAGIC_NUMBER
from pathlib import Path

from thunder_overlay import config

DIR_ENV = "THUNDER_OVERLAY_CACHE_DIR"
SWITCH_ENV = "THUNDER_OVERLAY_CACHE"
FORMAT = b"thunder-overlay bytecode cache 3\n"
NO_CACHE_DIR_REASON = f"no cache folder: set {DIR_ENV}, XDG_CACHE_HOME or HOME"


def switched_off() -> bool:
    return config.MODES.get(os.environ.get(SWITCH_ENV, "").strip().lower()) == "off"


def cache_dir() -> str | None:
    """The cache folder; None when there is none to use (no home directory and no variable names one)."""
    override = os.environ.get(DIR_ENV)
    if override:
        return override
    xdg = os.environ.get("XDG_CACHE_HOME")
    if xdg and os.path.isabs(xdg):
        return os.path.join(xdg, "thunder-overlay")
    home = os.path.expanduser("~")
    if home == "~":  # HOME unset and no passwd entry for this uid
        return None
    return os.path.join(home, ".cache", "thunder-overlay")


def _unsafe(folder: str) -> str | None:
    """Why ``folder`` must not hold entries (None: it may, or it does not exist yet): another user could
    put or swap files in it. Warns once per process, as pip does for its cache."""
    try:
        st = os.stat(folder)
    except OSError:
        return None
    if hasattr(os, "geteuid") and st.st_uid not in (os.geteuid(), 0):
        problem = f"{folder} belongs to another user (uid {st.st_uid})"
    elif st.st_mode & 0o022:
        problem = f"{folder} is writable by other users (mode {stat.S_IMODE(st.st_mode):o})"
    else:
        return None
    if problem not in _warned:
        _warned.add(problem)
        config.warn(f"thunder-overlay: the bytecode cache is off: {problem}. Set {DIR_ENV} to a folder of your own.")
    return problem


_warned: set = set()


def entry_path(thunder_path: str) -> Path | None:
    """Where the entry for the thunder package at ``thunder_path`` lives; None when the cache is off."""
    return None if off_reason() else _path_in(cache_dir(), thunder_path)


def _path_in(folder: str, thunder_path: str) -> Path:
    tag = sys.implementation.cache_tag or "python"
    name = hashlib.sha256(f"{thunder_path}\0{tag}\0{sys.flags.optimize}".encode()).hexdigest()[:24]
    return Path(folder) / f"thunder-{tag}-{name}.bin"


def off_reason() -> str | None:
    """Why the cache is neither read nor written in this process (None: it is used)."""
    if switched_off():
        return f"{SWITCH_ENV}={os.environ[SWITCH_ENV]}"
    folder = cache_dir()
    if folder is None:
        return NO_CACHE_DIR_REASON
    return _unsafe(folder)


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
    """``files``: [path, origin, sha256, size, mtime_ns] of every file of thunder the decision read. Raises
    OSError when the series directory cannot be read."""
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

# An entry: FORMAT, the size of the rest (8 bytes, little-endian), then chunks, each its size (8 bytes), its
# sha256 (32 bytes) and its bytes: the JSON header, then per patched file its text and its marshalled code.
_SIZE, _DIGEST = 8, 32
# No entry of a real thunder comes near this (0.2.6: 1.2 MB): anything larger is not read.
MAX_SIZE = 64 << 20


class Entry:
    """``files``: per patched file, [path, text, code object]. A text read from an entry stays bytes with
    its stored sha256 in ``text_digests``, checked when the text is first needed (see ``text``)."""

    def __init__(self, key: dict, facts: dict, files: list, text_digests: list | None = None):
        self.key, self.facts, self.files, self.text_digests = key, facts, files, text_digests


def text(data, digest: bytes | None, entry: Path | None = None) -> str | None:
    """A patched file's text; None when ``data``, read from ``entry``, does not have its stored sha256 (the
    entry is then removed, so that the next process writes a good one). Texts only serve tracebacks and
    ``inspect``: they are checked when first asked for, not at every import."""
    if digest is not None and hashlib.sha256(data).digest() != digest:
        if entry is not None:
            try:
                os.unlink(entry)
            except OSError:
                pass
        return None
    return data.decode("utf-8") if isinstance(data, bytes) else data


def _read_all(fd: int, size: int) -> bytes:
    parts, left = [], size
    while left:
        part = os.read(fd, min(left, 1 << 20))
        if not part:
            raise ValueError("truncated entry")
        parts.append(part)
        left -= len(part)
    return b"".join(parts)


def _read(path: Path) -> bytes:
    """The entry's bytes after FORMAT and its size. Opened without following a link and without blocking (a
    FIFO or device at the entry's name is refused, never waited on or read); only a regular file this user
    owns and no other user can write is read, and only as many bytes as it announces."""
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
    fd = os.open(path, flags)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise ValueError("the entry is not a regular file")
        if hasattr(os, "geteuid") and st.st_uid != os.geteuid():
            raise ValueError("the entry belongs to another user")
        if st.st_mode & 0o022:
            raise ValueError(f"the entry is writable by other users (mode {stat.S_IMODE(st.st_mode):o})")
        head = _read_all(fd, len(FORMAT) + _SIZE) if st.st_size >= len(FORMAT) + _SIZE else b""
        if head[: len(FORMAT)] != FORMAT:
            raise ValueError("not a thunder-overlay cache entry (or another format version)")
        size = int.from_bytes(head[len(FORMAT) :], "little")
        if size > MAX_SIZE or len(head) + size != st.st_size:
            raise ValueError(f"the entry announces {size} bytes and holds {st.st_size - len(head)}")
        return _read_all(fd, size)
    finally:
        os.close(fd)


def _chunks(data: bytes) -> list[tuple[bytes, memoryview]]:
    """(sha256, bytes) of each chunk; raises ValueError on anything else."""
    view, at, chunks = memoryview(data), 0, []
    while at < len(data):
        size = int.from_bytes(view[at : at + _SIZE], "little")
        start = at + _SIZE + _DIGEST
        if start + size > len(data):
            raise ValueError("truncated entry")
        chunks.append((bytes(view[at + _SIZE : start]), view[start : start + size]))
        at = start + size
    return chunks


def _checked(chunk: tuple[bytes, memoryview], what: str) -> memoryview:
    digest, data = chunk
    if hashlib.sha256(data).digest() != digest:
        raise ValueError(f"corrupt entry: the sha256 of {what} differs from the stored one")
    return data


def read(path: Path) -> Entry:
    """The entry at ``path``; raises OSError (missing, unreadable, a link) or ValueError (corrupt, foreign,
    not a regular file, writable by others). The header and every code chunk are checked against their
    sha256 and every code chunk must hold a code object; texts are checked when used (``text``)."""
    chunks = _chunks(_read(path))
    try:
        meta = json.loads(_checked(chunks[0], "the header").tobytes())
        paths = meta["paths"]
        if len(chunks) != 1 + 2 * len(paths):
            raise ValueError(f"{len(chunks)} chunks for {len(paths)} files")
        files, digests = [], []
        for i, p in enumerate(paths):
            code = marshal.loads(_checked(chunks[2 + 2 * i], f"the code of {p}"))
            if not isinstance(code, types.CodeType):
                raise ValueError(f"the code of {p} is a {type(code).__name__}, not a code object")
            digest, data = chunks[1 + 2 * i]
            files.append([p, data.tobytes(), code])
            digests.append(digest)
        return Entry(meta["key"], meta["facts"], files, digests)
    except (IndexError, KeyError, TypeError, EOFError, UnicodeDecodeError) as e:
        raise ValueError(f"corrupt entry: {type(e).__name__}: {e}") from None


# A temporary file older than this was left by a killed writer: the next write removes it.
STALE_SECONDS = 24 * 3600


def _remove_stale_temporaries(path: Path) -> None:
    now = time.time()
    try:
        with os.scandir(path.parent) as scan:
            for e in scan:
                if e.name.startswith("thunder-") and e.name.endswith(".tmp"):
                    st = e.stat(follow_symlinks=False)
                    if now - st.st_mtime > STALE_SECONDS and st.st_uid == os.geteuid():
                        os.unlink(e.path)
    except OSError:
        pass


def write(thunder_path: str, entry: Entry) -> str:
    """Write ``entry`` atomically; returns what happened, for status ("written: PATH" only when it was).
    Never raises."""
    off = off_reason()
    if off:
        return f"off ({off})"
    path = _path_in(cache_dir(), thunder_path)
    header = json.dumps({"key": entry.key, "facts": entry.facts, "paths": [f[0] for f in entry.files]},
                        sort_keys=True).encode()
    chunks = [header]
    for _, text, code in entry.files:
        chunks += [text if isinstance(text, bytes) else text.encode("utf-8"), marshal.dumps(code)]
    body = b"".join(len(c).to_bytes(_SIZE, "little") + hashlib.sha256(c).digest() + c for c in chunks)
    data = FORMAT + len(body).to_bytes(_SIZE, "little") + body
    try:
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        if _unsafe(str(path.parent)):  # made just now by another user, or with a loose umask
            return f"off ({_unsafe(str(path.parent))})"
        import tempfile

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
    _remove_stale_temporaries(path)
    return f"written: {path}"


def listing() -> tuple[str | None, str | None, list[dict]]:
    """(the cache folder, why the cache is off or None, one dict per entry and left temporary file in it:
    path, bytes, modified (epoch seconds), thunder (the package path it was made for) or problem)."""
    folder, off, found = cache_dir(), off_reason(), []
    if folder is None or not os.path.isdir(folder):
        return folder, off, found
    with os.scandir(folder) as scan:
        names = sorted(e.name for e in scan if e.name.startswith("thunder-") and e.name.endswith((".bin", ".tmp")))
    for name in names:
        path = Path(folder) / name
        st = os.lstat(path)
        item = {"path": str(path), "bytes": st.st_size, "modified": st.st_mtime, "thunder": None, "problem": None}
        if name.endswith(".tmp"):
            item["problem"] = "a temporary file (a writer at work, or killed)"
        else:
            try:
                item["thunder"] = json.loads(_checked(_chunks(_read(path))[0], "the header").tobytes())["key"]["thunder"]
            except Exception as e:
                item["problem"] = f"not usable: {type(e).__name__}: {e}"
        found.append(item)
    return folder, off, found


def clear() -> list[str]:
    """Remove every entry and temporary file of the cache folder; returns their paths."""
    _, _, found = listing()
    removed = []
    for item in found:
        try:
            os.unlink(item["path"])
            removed.append(item["path"])
        except FileNotFoundError:
            pass
    return removed
