"""What the bytecode cache trusts: a special file at the entry's name, an entry or folder another user can
write, a damaged entry, a non-code object in place of the code. Each run ends patched, with the entry
ignored or replaced: never a hang, never code the cache did not verify, never a broken `import thunder`.
Real thunder, fresh processes, each with a timeout."""

import hashlib
import os
import stat
import time

import pytest

from conftest import last_json, run_python

CACHE_ENV = "THUNDER_OVERLAY_CACHE_DIR"

# Import thunder and use every patched module's lines (inspect reads the cached texts for the patched code);
# print the status and, per patched module, a digest of the source inspect reports for its functions ("none"
# if it has none).
IMPORT = """
import hashlib, inspect, json, sys, types
import thunder, thunder_overlay
import thunder.transforms.autodiff, thunder.transforms.cudagraph
status = thunder_overlay.status()
sources = {}
for f in status["files"]:
    module = sys.modules[f["module"]]
    functions = [v for _, v in sorted(vars(module).items()) if isinstance(v, types.FunctionType)
                 and v.__code__.co_filename.endswith("(patched by thunder-overlay)")]
    try:
        sources[f["module"]] = hashlib.sha256("".join(map(inspect.getsource, functions)).encode()).hexdigest()
    except OSError:
        sources[f["module"]] = "none"
print(json.dumps({"status": status, "sources": sources,
                  "patched": all(type(sys.modules[f["module"]].__loader__).__name__ == "PatchedSourceLoader"
                                 for f in status["files"])}))
"""


def run(cache, **kwargs) -> dict:
    out = last_json(run_python(IMPORT, env={CACHE_ENV: str(cache)}, timeout=180, **kwargs))
    assert out["status"]["state"] == "patched" and out["patched"], out["status"]
    return out


def warm(cache) -> tuple[dict, os.PathLike]:
    first = run(cache)
    entry = first["status"]["bytecode_cache"].removeprefix("written: ")
    assert os.path.isfile(entry), first["status"]["bytecode_cache"]
    return first, entry


def replaced(out: dict, entry: str, why: str) -> None:
    cache = out["status"]["bytecode_cache"]
    assert cache.startswith(f"written: {entry} (replaced an entry that was not used: "), cache
    assert why in cache, cache
    st = os.lstat(entry)
    assert stat.S_ISREG(st.st_mode) and stat.S_IMODE(st.st_mode) == 0o600, oct(st.st_mode)


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs on this system")
def test_a_fifo_at_the_entry_name_is_not_waited_on(tmp_path):
    first, entry = warm(tmp_path)
    os.unlink(entry)
    os.mkfifo(entry)
    out = run(tmp_path)
    replaced(out, entry, "the entry is not a regular file")
    assert out["sources"] == first["sources"]


@pytest.mark.slow
def test_a_link_to_dev_zero_at_the_entry_name_is_not_read(tmp_path):
    first, entry = warm(tmp_path)
    os.unlink(entry)
    os.symlink("/dev/zero", entry)
    out = run(tmp_path)
    replaced(out, entry, "OSError")  # O_NOFOLLOW: ELOOP
    assert out["sources"] == first["sources"] and os.path.exists("/dev/zero")


@pytest.mark.slow
def test_a_link_to_a_valid_entry_is_not_followed(tmp_path):
    # A link at the entry's name, even to a good entry of this user's: whoever made the link chooses the file.
    _, entry = warm(tmp_path / "cache")
    elsewhere = tmp_path / "elsewhere.bin"
    os.replace(entry, elsewhere)
    os.symlink(elsewhere, entry)
    replaced(run(tmp_path / "cache"), entry, "OSError")


@pytest.mark.parametrize("mode", [pytest.param(0o666, id="666"), pytest.param(0o620, id="620", marks=pytest.mark.slow)])
@pytest.mark.slow
def test_an_entry_others_can_write_is_not_used(tmp_path, mode):
    _, entry = warm(tmp_path)
    os.chmod(entry, mode)
    replaced(run(tmp_path), entry, f"writable by other users (mode {mode:o})")


@pytest.mark.parametrize("mode", [pytest.param(0o777, id="777", marks=pytest.mark.slow), pytest.param(0o775, id="775")])
@pytest.mark.slow
def test_a_folder_others_can_write_turns_the_cache_off_with_one_warning(tmp_path, mode):
    _, entry = warm(tmp_path / "cache")
    before = open(entry, "rb").read()
    os.chmod(tmp_path / "cache", mode)
    proc = run_python(IMPORT, env={CACHE_ENV: str(tmp_path / "cache")}, timeout=180)
    out = last_json(proc)
    assert out["status"]["state"] == "patched" and out["patched"]
    problem = f"{tmp_path / 'cache'} is writable by other users (mode {mode:o})"
    assert out["status"]["bytecode_cache"] == f"off ({problem})", out["status"]["bytecode_cache"]
    assert proc.stderr.count(f"the bytecode cache is off: {problem}") == 1, proc.stderr
    assert open(entry, "rb").read() == before, "an unsafe folder is neither read nor written"


def _layout(data: bytes) -> dict:
    """Where the parts of an entry lie: the format line; the header's size (8 bytes) and sha256 (32 bytes);
    the header (marshalled: "files" lists per file its path, code size and sha256, text size and sha256);
    every file's code; every file's text."""
    import marshal

    start = data.index(b"\n") + 1
    size = int.from_bytes(data[start : start + 8], "little")
    header = start + 40
    files = marshal.loads(data[header : header + size])["files"]
    code = header + size
    text = code + sum(f[1] for f in files)
    return {"size": start, "digest": start + 8, "header": header, "header_size": size, "files": files,
            "code": code, "text": text}


def _flip(data: bytes, at: int) -> bytes:
    return data[:at] + bytes([data[at] ^ 0x10]) + data[at + 1 :]


@pytest.mark.slow
@pytest.mark.parametrize("where", ["format", "size", "digest", "header", "code", "code-end"])
def test_a_flipped_bit_is_never_used(tmp_path, where):
    first, entry = warm(tmp_path)
    data = open(entry, "rb").read()
    layout = _layout(data)
    first_code = layout["files"][0][1]
    at = {
        "format": 3, "size": layout["size"] + 1, "digest": layout["digest"] + 12,
        "header": layout["header"] + layout["header_size"] // 2, "code": layout["code"] + first_code // 2,
        "code-end": layout["text"] - 1,
    }[where]
    with open(entry, "wb") as f:
        f.write(_flip(data, at))
    out = run(tmp_path)
    replaced(out, entry, "ValueError")
    assert out["sources"] == first["sources"]
    assert run(tmp_path)["status"]["bytecode_cache"] == f"hit: {entry}"


@pytest.mark.slow
def test_a_flipped_bit_in_a_text_shows_no_lines_and_the_entry_is_replaced(tmp_path):
    # Texts only serve tracebacks and inspect: checked when first used, not at every import. A damaged one
    # gives no lines (never wrong ones), and the entry goes, so the next process writes a good one.
    first, entry = warm(tmp_path)
    data = open(entry, "rb").read()
    layout = _layout(data)
    with open(entry, "wb") as f:  # the text of the first patched file
        f.write(_flip(data, layout["text"] + layout["files"][0][3] // 2))
    os.chmod(entry, 0o600)
    out = run(tmp_path)
    assert out["status"]["bytecode_cache"] == f"hit: {entry}"
    damaged = out["status"]["files"][0]["module"]
    assert out["sources"][damaged] == "none"
    assert {m: s for m, s in out["sources"].items() if m != damaged} == {
        m: s for m, s in first["sources"].items() if m != damaged}
    assert not os.path.exists(entry)
    again = run(tmp_path)
    assert again["status"]["bytecode_cache"] == f"written: {entry}" and again["sources"] == first["sources"]


@pytest.mark.slow
def test_a_non_code_object_in_place_of_the_code_is_replaced(tmp_path, monkeypatch):
    # A well-formed entry (every sha256 right) whose code chunk holds an int: before, every later import of
    # thunder raised TypeError from exec and the entry was never replaced.
    from pathlib import Path

    from thunder_overlay import bytecode_cache

    first, entry = warm(tmp_path)
    stored = bytecode_cache.read(Path(entry))
    stored.files[1][2] = 42
    monkeypatch.setenv(CACHE_ENV, str(tmp_path))
    assert bytecode_cache.write(first["status"]["thunder_path"], stored) == f"written: {entry}"
    out = run(tmp_path)
    replaced(out, entry, f"the code of {stored.files[1][0]} is a int, not a code object")
    assert out["sources"] == first["sources"]


@pytest.mark.skipif(not hasattr(os, "geteuid"), reason="POSIX permissions")
@pytest.mark.slow
def test_a_failed_write_does_not_claim_to_have_replaced_the_entry(tmp_path):
    from test_bytecode_cache import _obeying_folder_modes

    _, entry = warm(tmp_path)
    with open(entry, "ab") as f:
        f.write(b"x")  # the announced size no longer matches
    os.chmod(tmp_path, 0o555)  # the new entry cannot be written
    try:
        popen = _obeying_folder_modes(tmp_path)
        cache = last_json(run_python(IMPORT, env={CACHE_ENV: str(tmp_path)}, timeout=180, **popen))["status"]
    finally:
        os.chmod(tmp_path, 0o700)
    cache = cache["bytecode_cache"]
    assert cache.startswith("not written (PermissionError") and "(did not replace an entry that was not used: " in cache


@pytest.mark.slow
def test_stale_temporary_files_are_removed_when_an_entry_is_written(tmp_path):
    _, entry = warm(tmp_path)
    name = os.path.basename(entry)
    stale, fresh = tmp_path / f"{name}.stale.tmp", tmp_path / f"{name}.fresh.tmp"
    stale.write_bytes(b"left by a killed writer")
    fresh.write_bytes(b"a writer at work")
    day_old = time.time() - 24 * 3600 - 60
    os.utime(stale, (day_old, day_old))
    os.unlink(entry)
    assert run(tmp_path)["status"]["bytecode_cache"] == f"written: {entry}"
    assert not stale.exists() and fresh.exists()


def test_entry_format_digests_are_sha256(tmp_path):
    # The stored digests are the sha256 of the header and of each code and text (not a weaker checksum),
    # and the entry holds exactly its parts: checked on a real entry.
    _, entry = warm(tmp_path)
    data = open(entry, "rb").read()
    layout = _layout(data)
    header = data[layout["header"] : layout["header"] + layout["header_size"]]
    assert data[layout["digest"] : layout["header"]] == hashlib.sha256(header).digest()
    code_at, text_at = layout["code"], layout["text"]
    for _, code_size, code_digest, text_size, text_digest in layout["files"]:
        assert hashlib.sha256(data[code_at : code_at + code_size]).digest() == code_digest
        assert hashlib.sha256(data[text_at : text_at + text_size]).digest() == text_digest
        code_at, text_at = code_at + code_size, text_at + text_size
    assert text_at == len(data)
