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
overlay then patches as if there were no cache; so is a folder at the entry's path (status says so), and
no cache problem raises. Without a cache folder (no absolute THUNDER_OVERLAY_CACHE_DIR or XDG_CACHE_HOME,
no home directory: a container running an arbitrary uid) the cache is off. ``clear`` removes entries only
inside the folder, never what a link points to.
"""

from __future__ import annotations

import hashlib
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
FORMAT = b"thunder-overlay bytecode cache 4\n"
NO_CACHE_DIR_REASON = f"no cache folder: set {DIR_ENV}, XDG_CACHE_HOME or HOME"


# THUNDER_OVERLAY_CACHE's accepted values: THUNDER_OVERLAY's that mean on or off
SWITCH_VALUES = {value: mode for value, mode in config.MODES.items() if mode in ("on", "off")}


def switched_off() -> bool:
    value = os.environ.get(SWITCH_ENV, "").strip().lower()
    if value not in SWITCH_VALUES:
        accepted = ", ".join(repr(v) for v in SWITCH_VALUES if v) + " (unset means on)"
        _warn_once(config.unknown_value(SWITCH_ENV, os.environ.get(SWITCH_ENV), accepted, "The cache stays on."))
    return SWITCH_VALUES.get(value) == "off"


def cache_dir() -> str | None:
    """The cache folder; None when there is none to use (no home directory and no variable names one). A
    relative THUNDER_OVERLAY_CACHE_DIR is ignored, with one warning, as XDG's rule ignores a relative
    XDG_CACHE_HOME: it would name another folder in every working directory."""
    override = os.environ.get(DIR_ENV)
    if override and os.path.isabs(override):
        return override
    if override:
        _warn_once(f"thunder-overlay: {DIR_ENV}={override!r} is ignored: not an absolute path (as a relative "
                   "XDG_CACHE_HOME is ignored).")
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
    _warn_once(f"thunder-overlay: the bytecode cache is off: {problem}. Set {DIR_ENV} to a folder of your own.")
    return problem


_warned: set = set()


def _warn_once(message: str) -> None:
    """Warn once per process (the cache's settings are read at every look-up)."""
    if message not in _warned:
        _warned.add(message)
        config.warn(message)


def entry_path(thunder_path: str) -> Path | None:
    """Where the entry for the thunder package at ``thunder_path`` lives; None when the cache is off."""
    return None if off_reason() else _path_in(cache_dir(), thunder_path)


def _path_in(folder: str, thunder_path: str) -> Path:
    tag = sys.implementation.cache_tag or "python"
    # surrogatepass: a path that is not valid UTF-8 (its bytes decoded with surrogateescape) has an entry too
    key = f"{thunder_path}\0{tag}\0{sys.flags.optimize}".encode("utf-8", "surrogatepass")
    name = hashlib.sha256(key).hexdigest()[:24]
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
ENGINE_FILES = ("config.py", "_startup.py", "_deciding.py", "engine.py", "locate.py", "manifest.py", "patching.py", "patchset.py",
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

# An entry: FORMAT; the size of the header (8 bytes, little-endian) and its sha256 (32 bytes); the header,
# marshalled: {"key", "facts", "size" (of the whole entry), "files": [[path, code size, code sha256, text
# size, text sha256], ...]}; then every file's marshalled code; then every file's text. Texts come last so
# that an import reads only the header and the code: a text is read when tracebacks or inspect ask for it.
_SIZE, _DIGEST = 8, 32
_HEAD = len(FORMAT) + _SIZE + _DIGEST
# No entry of a real thunder comes near this (0.2.6: 1.2 MB): anything larger is not read.
MAX_SIZE = 64 << 20


class Entry:
    """``files``: per patched file, [path, text, code object]. A text read from an entry is a ``Text``: where
    it lies in the entry, read and checked when first asked for."""

    def __init__(self, key: dict, facts: dict, files: list):
        self.key, self.facts, self.files = key, facts, files

    def close(self) -> None:
        """Let go of the entry's file (an entry not used: its texts will not be asked for)."""
        fds = {t.fd for _, t, _ in self.files if isinstance(t, Text)}
        for fd in fds:
            os.close(fd)


class Text:
    """Where a text lies in the entry the code came from: ``fd`` stays open on that file, so the text read
    later is that entry's even after another process replaced or removed it."""

    __slots__ = ("entry", "fd", "offset", "size", "digest")

    def __init__(self, entry: Path, fd: int, offset: int, size: int, digest: bytes):
        self.entry, self.fd, self.offset, self.size, self.digest = entry, fd, offset, size, digest


def text(stored) -> str | None:
    """A patched file's text: ``stored`` itself, or, for a ``Text``, its bytes read from the entry; None when
    they do not have their stored sha256 (the entry is then removed, unless another process replaced it
    meanwhile, so that the next process writes a good one)."""
    if not isinstance(stored, Text):
        return stored
    try:
        data = os.pread(stored.fd, stored.size, stored.offset)
        if hashlib.sha256(data).digest() == stored.digest:
            return data.decode("utf-8")
    except (OSError, UnicodeDecodeError):
        pass
    try:
        if os.stat(stored.entry).st_ino == os.fstat(stored.fd).st_ino:
            os.unlink(stored.entry)
    except OSError:
        pass
    return None


def _read_all(fd: int, size: int) -> bytes:
    parts, left = [], size
    while left:
        part = os.read(fd, min(left, 1 << 20))
        if not part:
            raise ValueError("truncated entry")
        parts.append(part)
        left -= len(part)
    return b"".join(parts)


def _open(path: Path) -> int:
    """A descriptor of the entry, opened without following a link and without blocking (a FIFO or device at
    the entry's name is refused, never waited on or read), for a regular file this user owns and no other
    user can write; raises OSError or ValueError otherwise."""
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
    except BaseException:
        os.close(fd)
        raise
    return fd


def _checked(data: bytes, digest: bytes, what: str) -> bytes:
    if hashlib.sha256(data).digest() != digest:
        raise ValueError(f"corrupt entry: the sha256 of {what} differs from the stored one")
    return data


def read(path: Path) -> Entry:
    """The entry at ``path``; raises OSError (missing, unreadable, a link) or ValueError (corrupt, foreign,
    not a regular file, writable by others). Reads the header and the code only, never more than the entry
    announces: the header and every code chunk must have their stored sha256, and every code chunk must hold
    a code object; each text is checked when it is read (``text``)."""
    fd = _open(path)
    try:
        size = os.fstat(fd).st_size
        head = _read_all(fd, _HEAD) if size >= _HEAD else b""
        if head[: len(FORMAT)] != FORMAT:
            raise ValueError("not a thunder-overlay cache entry (or another format version)")
        header_size = int.from_bytes(head[len(FORMAT) : len(FORMAT) + _SIZE], "little")
        if _HEAD + header_size > min(size, MAX_SIZE):
            raise ValueError(f"the entry announces a header of {header_size} bytes and holds {size - _HEAD}")
        try:
            meta = marshal.loads(_checked(_read_all(fd, header_size), head[-_DIGEST:], "the header"))
            files = meta["files"]
            if meta["size"] != size:
                raise ValueError(f"the entry announces {meta['size']} bytes and holds {size}")
            code_end = _HEAD + header_size + sum(f[1] for f in files)
            if code_end + sum(f[3] for f in files) != size:
                raise ValueError("its chunks do not add up to its size")
            codes = _read_all(fd, code_end - _HEAD - header_size)
        except (KeyError, TypeError, IndexError, EOFError) as e:
            raise ValueError(f"corrupt entry: {type(e).__name__}: {e}") from None
        entry_files, code_at, text_at = [], 0, code_end
        for p, code_size, code_digest, text_size, text_digest in files:
            code = marshal.loads(_checked(codes[code_at : code_at + code_size], code_digest, f"the code of {p}"))
            if not isinstance(code, types.CodeType):
                raise ValueError(f"the code of {p} is a {type(code).__name__}, not a code object")
            entry_files.append([p, Text(path, fd, text_at, text_size, text_digest), code])
            code_at, text_at = code_at + code_size, text_at + text_size
    except BaseException:
        os.close(fd)
        raise
    return Entry(meta["key"], meta["facts"], entry_files)


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
    try:
        return _write(_path_in(cache_dir(), thunder_path), entry)
    except Exception as e:  # a cache problem never refuses the patch
        return f"not written ({type(e).__name__}: {e})"


def _write(path: Path, entry: Entry) -> str:
    if os.path.isdir(path) and not os.path.islink(path):
        return (f"not written: {path} is a folder, not an entry: every import patches from the series until it "
                "is removed (`thunder-overlay cache --clear` removes it when empty)")
    codes = [marshal.dumps(code) for _, _, code in entry.files]
    texts = [text(t) if isinstance(t, Text) else t for _, t, _ in entry.files]  # an entry read back: its texts
    if None in texts:
        return "not written (a text of the entry it was read from failed its check)"
    texts = [t if isinstance(t, bytes) else t.encode("utf-8") for t in texts]
    files = [[p, len(c), hashlib.sha256(c).digest(), len(t), hashlib.sha256(t).digest()]
             for (p, _, _), c, t in zip(entry.files, codes, texts)]
    meta = {"key": entry.key, "facts": entry.facts, "files": files, "size": 0}
    # marshal writes any int below 2**31 in 5 bytes: the header's size does not depend on the entry's
    meta["size"] = _HEAD + len(marshal.dumps(meta)) + sum(map(len, codes)) + sum(map(len, texts))
    header = marshal.dumps(meta)
    data = b"".join([FORMAT, len(header).to_bytes(_SIZE, "little"), hashlib.sha256(header).digest(), header,
                     *codes, *texts])
    try:
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        unsafe = _unsafe(str(path.parent))  # made just now by another user, or with a loose umask
        if unsafe:
            return f"off ({unsafe})"
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
    path, bytes, modified (epoch seconds), thunder (the package path it was made for) or problem). Raises
    OSError when the folder cannot be read."""
    folder, off, found = cache_dir(), off_reason(), []
    if folder is None or not os.path.isdir(folder):
        return folder, off, found
    with os.scandir(folder) as scan:
        names = sorted(e.name for e in scan if e.name.startswith("thunder-") and e.name.endswith((".bin", ".tmp")))
    for name in names:
        path = Path(folder) / name
        try:
            st = os.lstat(path)
        except FileNotFoundError:  # removed meanwhile (a writer's temporary file, another --clear)
            continue
        item = {"path": str(path), "bytes": st.st_size, "modified": st.st_mtime, "thunder": None, "problem": None}
        if stat.S_ISDIR(st.st_mode):
            item["problem"] = "a folder, not an entry: the cache cannot be written while it is here"
        elif name.endswith(".tmp"):
            item["problem"] = "a temporary file (a writer at work, or killed)"
        else:
            try:
                stored = read(path)
                item["thunder"] = stored.key["thunder"]
                stored.close()
            except Exception as e:
                item["problem"] = f"not usable: {type(e).__name__}: {e}"
        found.append(item)
    return folder, off, found


def clear(thunder_path: str | None = None) -> tuple[list[str], list[tuple[str, str]]]:
    """Remove the entries made for the thunder package at ``thunder_path`` (at any optimisation level), this
    interpreter's entry for it even where it cannot be read, and their temporary files; with None, every entry
    and temporary file of the cache folder. Returns (the paths removed, [(path, why it was left)]). Nothing
    outside the folder is touched: a link is removed, never followed; a folder named like an entry is removed
    only when empty. Raises OSError when the folder cannot be read."""
    folder, _, found = listing()
    if thunder_path is not None:
        own = _path_in(folder, thunder_path).name if folder else None
        found = [i for i in found if i["thunder"] == thunder_path or os.path.basename(i["path"]).startswith(own)]
    removed, left = [], []
    for item in found:
        path = item["path"]
        try:
            if stat.S_ISDIR(os.lstat(path).st_mode):
                os.rmdir(path)
            else:
                os.unlink(path)
            removed.append(path)
        except FileNotFoundError:
            pass
        except OSError as e:
            left.append((path, _why_left(path, e)))
    return removed, left


def _why_left(path: str, error: OSError) -> str:
    import errno

    if error.errno in (errno.ENOTEMPTY, errno.EEXIST):
        return "a folder, not an entry, and not empty: remove it yourself if nothing in it is yours to keep"
    try:
        owner = os.lstat(path).st_uid
    except OSError:
        owner = None
    if hasattr(os, "geteuid") and owner not in (None, os.geteuid()):
        return f"it belongs to another user (uid {owner}): {error.strerror}"
    if error.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
        return f"the cache folder does not let you remove it: {error.strerror}"
    return f"{type(error).__name__}: {error.strerror or error}"
