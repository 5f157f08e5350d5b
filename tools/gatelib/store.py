"""The outcome store: per-unit outcomes of one side, kept in git (OUT/stock.outcomes, OUT/overlay.outcomes).

A text file of sorted blocks, written again (temp file + os.replace, under a lock) each time a unit finishes:

    [series 5d1c0a29e6f3b8a4]                          one per series a unit block of the overlay side names
    base = 0.2.6
    thunder/core/jit_ext.py = 0001-jit-allocate-proxy-names-after-tracing-trace-by-trace.patch <sha256>

    [unit test_ops #2/4]                               one per unit (module, or shard i/N of it)
    key = 9b0e4d6c1f2a3b4c                             digest of the key.* fields below (runner.key)
    key.k = not cuda
    key.thunder_tree = <sha256>
    ...
    tests = 712                                        tests selected (None: pytest never got that far)
    finished = 1                                       pytest's exit status, or 'no': it did not end by itself
    returncode = 1                                     the process's
    loader = _frozen_importlib_external.SourceFileLoader   what loaded thunder/core/jit_ext.py
    collect_error = TestFoo ImportError: ...           one per file or class that failed to collect ('-': the file)
      test_a[cpu] passed                               one per test, sorted; non-passed ones with a one-line reason
      test_b[cpu] skipped requires CUDA

No seconds and no dates: a run of the same key writes the same lines (a unit's wall and CPU seconds go to
OUT/<side>.times, one line per unit under the digest of the key they timed). A test id (or collection part) holding
whitespace is written as a JSON string. A unit is reused only while its key matches what the side would run now
(runner.Runner.key); a run of the unit with another key replaces its block, and a module's blocks of another
shard count go with it.
"""

import fcntl
import hashlib
import json
import os
import re
from contextlib import contextmanager
from pathlib import Path

from gatelib.outcomes import norm_id, ordinary_exit, test_part

REASON_CHARS = 120
HEADER = ("# thunder's tests on the {side} side, one block per unit (module or shard), written by tools/gate.py as "
          "each unit finishes;\n# a block is reused while its key matches (see tools/gatelib/store.py). Generated: "
          "do not edit.\n")


def path(folder, side):
    return Path(folder) / f"{side}.outcomes"


def digest(data):
    """A short stable digest of a JSON-able value (a key, a series fingerprint)."""
    return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()[:16]


def one_line(text, limit=REASON_CHARS):
    """A reason on one line: the first line of a traceback's last 'E   ...' group (the exception, before pytest's
    assertion details), else the last non-empty line; addresses (0x7f...) masked so that a rerun writes the same
    text; at most `limit` characters."""
    lines = [line for line in (text or "").splitlines() if line.strip()]
    marked = {i for i, line in enumerate(lines) if line.startswith("E ")}
    if marked:
        first = max(marked)
        while first - 1 in marked:
            first -= 1
        reason = lines[first][1:]
    else:
        reason = lines[-1] if lines else ""
    reason = reason.strip().removeprefix("Skipped: ")
    reason = re.sub(r"0x[0-9a-fA-F]{4,}", "0x?", " ".join(reason.split()))
    return reason if len(reason) <= limit else reason[:limit - 3] + "..."


def _token(text):
    return json.dumps(text) if not text or text[0] == '"' or re.search(r"\s", text) else text


def _split_token(line):
    """'<token> <rest>' -> (token, rest), the token possibly a JSON string."""
    if line.startswith('"'):
        token, end = json.JSONDecoder().raw_decode(line)
        return token, line[end:].strip()
    token, _, rest = line.partition(" ")
    return token, rest.strip()


def block_of(unit, key, run):
    """A finished run (read_run()'s dict plus returncode) -> the block the store keeps of it."""
    jit_ext = (run.get("meta") or {}).get("jit_ext") or ""
    return {"unit": unit.label, "module": unit.module, "index": unit.index, "count": unit.count,
            "key": key, "digest": digest(key), "tests": run["total"], "finished": run["finished"],
            "returncode": run["returncode"], "loader": jit_ext.rpartition(" via ")[2] or None,
            "collect_errors": {part: one_line(rec.get("reason") or rec.get("msg"), 300)
                               for part, rec in run["collect_errors"].items()},
            "results": {test_part(tid): (rec["outcome"], "" if rec["outcome"] == "passed" else one_line(rec.get("msg")))
                        for tid, rec in run["results"].items()}}


def usable(block):
    """Whether a block may stand in for a run: pytest ended by itself with an ordinary exit status."""
    return block["finished"] is not None and ordinary_exit(block["returncode"], block["collect_errors"])


def run_of(block, where):
    """A block -> a dict like runner.Runner.run's (read_run()'s fields plus returncode, seconds, reused, path)."""
    module = block["module"]
    return {"header": {}, "meta": {}, "total": block["tests"], "collected": None, "finished": block["finished"],
            "trailer": {"complete": True, "returncode": block["returncode"]}, "returncode": block["returncode"],
            "results": {norm_id(module, "::" + part): {"outcome": outcome, "msg": reason}
                        for part, (outcome, reason) in block["results"].items()},
            "collect_errors": {part: {"reason": reason, "msg": reason} for part, reason in block["collect_errors"].items()},
            "seconds": 0, "reused": f"{Path(where).name} (key {block['digest']})", "path": Path(where)}


def _format_block(b):
    lines = [f"[unit {b['unit']}]", f"key = {b['digest']}"]
    lines += [f"key.{name} = {b['key'][name]}" for name in sorted(b["key"])]  # strings (runner.Runner.key)
    lines += [f"tests = {_value(b['tests'])}", f"finished = {'no' if b['finished'] is None else b['finished']}",
              f"returncode = {b['returncode']}", f"loader = {_value(b['loader'])}"]
    lines += [f"collect_error = {_token(part or '-')} {reason}" for part, reason in sorted(b["collect_errors"].items())]
    lines += [f"  {_token(part)} {outcome}" + (f" {reason}" if reason else "")
              for part, (outcome, reason) in sorted(b["results"].items())]
    return "\n".join(lines) + "\n"


def _value(v):
    return "-" if v is None else str(v)


def _parse_value(text):
    if text in ("-", "no"):  # 'no': finished = no
        return None
    return int(text) if re.fullmatch(r"-?\d+", text) else text


def _format_series(name, fp):
    lines = [f"[series {name}]", f"base = {_value(fp.get('base'))}"]
    lines += [f"{file} = {patch} {sha}" for file in sorted(fp["files"]) for patch, sha in sorted(fp["files"][file].items())]
    return "\n".join(lines) + "\n"


def _unit_order(b):
    return b["module"], b["count"], b["index"]


def dumps(store):
    """{'side', 'series': {digest: fingerprint}, 'blocks': {unit label: block}} -> the file's text."""
    parts = [HEADER.format(side=store["side"])]
    parts += [_format_series(name, store["series"][name]) for name in sorted(store["series"])]
    parts += [_format_block(b) for b in sorted(store["blocks"].values(), key=_unit_order)]
    return "\n".join(parts)


def loads(text, side="?"):
    store = {"side": side, "series": {}, "blocks": {}}
    current = None
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip() or line.startswith("#"):
            continue
        if m := re.fullmatch(r"\[series (\S+)\]", line):
            current = store["series"][m.group(1)] = {"base": None, "files": {}}
        elif line.startswith("[unit ") and line.endswith("]") and (unit := _unit_of_label(line[6:-1])):
            module, count, index = unit
            current = {"unit": line[6:-1], "module": module, "index": index, "count": count, "key": {},
                       "digest": None, "tests": None, "finished": None, "returncode": None, "loader": None,
                       "collect_errors": {}, "results": {}}
            store["blocks"][current["unit"]] = current
        elif current is None:
            raise ValueError(f"line {n}: outside a block: {line!r}")
        elif "files" in current:  # a series section
            name, _, value = line.partition(" = ")
            if name == "base":
                current["base"] = _parse_value(value)
            else:
                patch, _, sha = value.partition(" ")
                current["files"].setdefault(name, {})[patch] = sha
        elif line.startswith("  "):
            part, rest = _split_token(line[2:])
            outcome, _, reason = rest.partition(" ")
            current["results"][part] = (outcome, reason)
        else:
            name, _, value = line.partition(" = ")
            if name == "key":
                current["digest"] = value
            elif name.startswith("key."):
                current["key"][name[4:]] = value
            elif name == "collect_error":
                part, reason = _split_token(value)
                current["collect_errors"]["" if part == "-" else part] = reason
            elif name in ("tests", "finished", "returncode", "loader"):
                current[name] = _parse_value(value)
            else:
                raise ValueError(f"line {n}: unknown field {name!r}")
    return store


def read(file, side=None):
    """The store in `file` (an empty one when there is no file)."""
    file = Path(file)
    side = side or file.stem
    return loads(file.read_text(), side) if file.exists() else {"side": side, "series": {}, "blocks": {}}


@contextmanager
def _locked(file):
    """One writer at a time per folder (a --stock-only run and a full run may share a store)."""
    with open(Path(file).parent / ".outcomes.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def put(file, block, series=None):
    """Writes `block` into the store `file`, replacing the unit's old block and the module's blocks of another
    shard count; `series` ({digest: fingerprint}) adds the sections the block's key names, and sections no
    block names any more go."""
    file = Path(file)
    file.parent.mkdir(parents=True, exist_ok=True)
    with _locked(file):
        store = read(file)
        store["blocks"] = {label: b for label, b in store["blocks"].items()
                           if b["module"] != block["module"] or b["count"] == block["count"]}
        store["blocks"][block["unit"]] = block
        store["series"].update(series or {})
        named = {b["key"].get("series") for b in store["blocks"].values()}
        store["series"] = {name: fp for name, fp in store["series"].items() if name in named}
        _replace(file, dumps(store))


def _replace(file, text):
    """Writes `file` whole or not at all: a temporary file beside it, then os.replace."""
    tmp = file.with_name(f".{file.name}.{os.getpid()}.tmp")
    try:
        tmp.write_text(text)
        os.replace(tmp, file)
    finally:
        tmp.unlink(missing_ok=True)


def times_path(folder, side):
    return Path(folder) / f"{side}.times"


TIMES_HEADER = ("# wall and CPU seconds of each unit's pytest run on the {side} side (CPU: the process and every\n"
                "# process it waited for), under the key of the run they timed (see {side}.outcomes); written by\n"
                "# tools/gate.py as each unit finishes.\n")


def read_times(file):
    """{unit label: (key digest, wall seconds, CPU seconds or None)} from a times file (empty when there is none)."""
    file = Path(file)
    found = {}
    for line in file.read_text().splitlines() if file.exists() else []:
        if not line.strip() or line.startswith("#"):
            continue
        label, _, rest = line.partition(" = ")
        key, wall, cpu = rest.split()
        found[label] = (key, float(wall.removeprefix("wall=")), _parse_seconds(cpu.removeprefix("cpu=")))
    return found


def _unit_of_label(label):
    """'test_ops #2/4' -> (module, shard count, shard index), the order of units in a store; None for no label."""
    m = re.fullmatch(r"(\S+)(?: #(\d+)/(\d+))?", label)
    return (m.group(1), int(m.group(3) or 1), int(m.group(2) or 1)) if m else None


def _parse_seconds(text):
    return None if text == "-" else float(text)


def time_of(folder, side, block):
    """(wall, CPU) seconds of the run a stored block holds; (None, None) when no time was recorded for its key."""
    key, wall, cpu = read_times(times_path(folder, side)).get(block["unit"], (None, None, None))
    return (wall, cpu) if key == block["digest"] else (None, None)


def put_time(folder, side, label, key_digest, wall, cpu):
    """Records the times of the run of key `key_digest` of the unit `label`, replacing the unit's old line."""
    file = times_path(folder, side)
    with _locked(file):
        times = read_times(file)
        times[label] = (key_digest, wall, cpu)
        lines = [f"{name} = {key} wall={w:.1f} cpu=" + ("-" if c is None else f"{c:.1f}")
                 for name, (key, w, c) in sorted(times.items(), key=lambda item: _unit_of_label(item[0]))]
        _replace(file, TIMES_HEADER.format(side=side) + "\n".join(lines) + "\n")
