"""bench/distributed_identity.py end to end on the smallest slice (the named module under ddp and fsdp ZERO3,
2 gloo ranks per side), and its judge failing on a changed gradient, a changed trace and a lost name."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from conftest import REPO, requires_overlay

sys.path.insert(0, str(REPO / "bench"))

pytestmark = [pytest.mark.slow, requires_overlay]

CONFIGS = ("ddp", "fsdp-zero3-block")


@pytest.fixture(scope="module")
def records(tmp_path_factory):
    out = tmp_path_factory.mktemp("distributed")
    proc = subprocess.run([sys.executable, str(REPO / "bench" / "distributed_identity.py"), "--models", "named",
                           "--configs", *CONFIGS, "--out", str(out)], capture_output=True, text=True, timeout=1200)
    return proc, out


def test_the_check_passes_and_prints_its_table(records):
    proc, _ = records
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    for config in CONFIGS:
        assert re.search(rf"\| named +\| {config} +\| bitwise 2/2 .*\| identical +\|", proc.stdout), proc.stdout
    assert "stock disabled, overlay patched" in proc.stdout
    assert "bitwise 2/2" in proc.stdout and "caught 2/2" in proc.stdout and "pass 2/2" in proc.stdout
    assert "check_traces' notes, named / fsdp-zero3-block" in proc.stdout
    assert "wall time" in proc.stdout and "(exit 0)" in proc.stdout


def _judge(out, config):
    import distributed_identity

    stock_meta = json.loads((out / "stock" / "side.json").read_text())
    row = distributed_identity.Row("named", config)
    distributed_identity.judge(row, out, set(stock_meta["thunder_locals"]))
    return row


def test_a_changed_gradient_a_changed_trace_and_a_lost_name_are_differences(records):
    _, out = records
    assert _judge(out, "ddp").ok
    stem = out / "overlay" / "named.ddp.rank1"
    saved = torch.load(f"{stem}.pt")
    grad = saved["grads"]["fc1.weight"]
    grad.view(-1)[0] = torch.nextafter(grad.view(-1)[0], torch.tensor(float("inf")))  # one ulp
    torch.save(saved, f"{stem}.pt")
    record = json.loads(Path(f"{stem}.json").read_text())
    record["backward"]["text"] = record["backward"]["text"].replace("torch.", "torch.foo_", 1)
    # the overlay names the value the program bound to `hidden` with a generated name: a lost name
    names = record["names"]
    names["symbols"] = [[d, sym, [("t_lost" if n == "hidden" else n) for n in outs],
                         [("t_lost" if n == "hidden" else n) for n in args]] for d, sym, outs, args in names["symbols"]]
    names["bindings"]["t_lost"] = names["bindings"].pop("hidden")
    Path(f"{stem}.json").write_text(json.dumps(record))
    row = _judge(out, "ddp")
    text = "\n".join(row.details)
    assert not row.ok and row.grads == "bitwise 1/2" and row.backward.startswith("1/2"), (row, text)
    assert "rank 1: gradients differ: fc1.weight" in text and "rank 1: backward trace, line" in text
    assert "rank 1: names:" in text and "lost hidden -> t_lost" in text and row.names.endswith("/1"), row.names
