"""Invariant I6: a program's traces are byte-identical in every process, whatever PYTHONHASHSEED. Stock
thunder's order of a module's parameters under thunder.jit depends on it (patch 0006 fixes that)."""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor

import pytest
import torch
import thunder

from thunder_overlay import name_corpus, names

from conftest import requires_overlay, run_python

ORDER_PROGRAM = f"{names.CORPUS}:parameters_in_order"
MARK = "TRACE-DIGEST "

# Run in a child per hash seed: jits each target and prints one line per target, {"target", "ok", "traces": {kind:
# sha256 of the trace's text}} (initial and final computation traces, the backward trace), the text normalised as
# the comparator normalises it (no pass durations, no autograd.Function class ids: both differ between processes)
DIGESTS = """
import hashlib, json, warnings
import thunder
from thunder_overlay import equivalence, names

warnings.filterwarnings("ignore")


def digests(target):
    jitted = names.jit_target(target)
    found = {}
    for k, jfn in enumerate(jitted):
        traces = thunder.last_traces(jfn)
        found[f"{k}:initial"], found[f"{k}:final"] = traces[0], traces[-1]
        backward = thunder.last_backward_traces(jfn)
        if backward:
            found[f"{k}:backward"] = backward[-1]
    return {kind: hashlib.sha256(equivalence.normalise(str(t)).encode()).hexdigest()[:16] for kind, t in found.items()}


for target in TARGETS:
    try:
        record = {"target": target, "ok": True, "traces": digests(target)}
    except Exception as e:  # a program thunder cannot compile is a result
        record = {"target": target, "ok": False, "error": f"{type(e).__name__}: {e}".splitlines()[0][:200]}
    print(MARK + json.dumps(record), flush=True)
"""


def trace_digests(targets: list[str], seed: str, overlay: str) -> dict[str, dict]:
    """{target: the child's record} from one process with this hash seed."""
    proc = run_python(f"TARGETS, MARK = {targets!r}, {MARK!r}", DIGESTS, overlay=overlay,
                      env={"PYTHONHASHSEED": seed, "PYTHONWARNINGS": "ignore"}, timeout=1800)
    found = {}
    for line in proc.stdout.splitlines():
        if line.startswith(MARK):
            record = json.loads(line[len(MARK):])
            found[record["target"]] = record
    assert set(found) == set(targets), proc.stderr[-3000:]
    return found


@pytest.mark.slow
@requires_overlay
def test_every_corpus_program_traces_the_same_under_every_hash_seed():
    targets = names.corpus_targets()
    assert ORDER_PROGRAM in targets
    with ThreadPoolExecutor(2) as pool:
        first, second = pool.map(lambda seed: trace_digests(targets, seed, "1"), ("1", "2"))
    assert [t for t in targets if not first[t]["ok"]] == []
    differ = [t for t in targets if first[t] != second[t]]
    assert differ == [], {t: (first[t], second[t]) for t in differ}


@pytest.mark.slow
def test_stock_traces_a_module_parameter_loop_differently_per_hash_seed():
    # The check above can fail: stock iterates the parameters in a set's order
    records = [trace_digests([ORDER_PROGRAM], seed, "0")[ORDER_PROGRAM] for seed in ("1", "2")]
    assert all(r["ok"] for r in records)
    assert records[0]["traces"] != records[1]["traces"]


@requires_overlay
@pytest.mark.parametrize("method", ["parameters", *(pytest.param(m, marks=pytest.mark.slow)
                                                   for m in ("named_parameters", "buffers", "named_buffers"))])
def test_module_members_come_in_the_module_order(method):
    module = torch.nn.Sequential(*(torch.nn.Sequential(torch.nn.Linear(3, 3), torch.nn.BatchNorm1d(3)) for _ in range(3)))

    def members(x):
        found = getattr(module, method)()
        tensors = [m[1] if isinstance(m, tuple) else m for m in found]
        return x, *(t.float() * (k + 1) for k, t in enumerate(tensors))

    x = torch.randn(2)
    for got, want in zip(thunder.jit(members)(x), members(x), strict=True):
        torch.testing.assert_close(got, want)


@requires_overlay
def test_the_corpus_parameter_loop_matches_eager():
    (x,) = name_corpus.parameters_in_order_inputs()
    got, want = thunder.jit(name_corpus.parameters_in_order)(x), name_corpus.parameters_in_order(x)
    for a, b in zip(got, want, strict=True):
        torch.testing.assert_close(a, b)
