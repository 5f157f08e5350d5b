"""Benchmark workloads for thunder.jit: each builder returns ``(fn_or_module, args)`` on a device.

Every workload is a :class:`Workload`; ``WORKLOADS`` lists them all with the suite tier they
belong to ("quick" runs in every mode, "default" in default and full mode, "full" only with
``--bench-full``, "large" only with ``--bench-large``).  Builders import thunder lazily so that
this module can be imported (e.g. by compare.py) without paying for it.
"""

from __future__ import annotations

import linecache
from dataclasses import dataclass
from typing import Any, Callable

STOCK_CRASH_283 = "stock thunder crashes on this program (upstream #283)"


@dataclass(frozen=True)
class Workload:
    name: str
    build: Callable[[str], tuple[Callable, tuple]]
    tier: str = "default"  # quick | default | full | large
    # rounds of the compile benchmark: (quick mode, other modes)
    compile_rounds: tuple[int, int] = (3, 5)
    exec_in_quick: bool = True
    # set when stock thunder is known to crash: a crash is then a skip with this reason
    stock_crash: str | None = None


def _randn(device: str, *shape: int):
    import torch

    return torch.randn(*shape, device=device)


# --- autocast seeds ---------------------------------------------------------------------------


def _autocast(fn):
    import thunder
    import thunder.transforms.autocast  # not imported by `import thunder` in 0.2.6

    return thunder.transforms.autocast.autocast(fn, dtype=thunder.bfloat16)


def autocast_seed(device: str):
    """The seed that stock 0.2.6 handles: ``(a @ b) + c`` under bf16 autocast."""

    def h(a, b, c):
        return (a @ b) + c

    return _autocast(h), tuple(_randn(device, 2, 2) for _ in range(3))


def autocast_chain(device: str):
    """A matmul chain under bf16 autocast; stock thunder renames a bf16 proxy to a float32 one (#283)."""

    def f(a, b, c):
        u = a @ b
        v = u @ c
        return v + c

    return _autocast(f), tuple(_randn(device, 2, 2) for _ in range(3))


# --- seed #946: repeated user names, random op ----------------------------------------------


def _func_946(x, y, *, device):
    from thunder_overlay.reproducers.seed_946_names import func

    return func(x, y, device)


def seed_946(device: str):
    import functools

    return functools.partial(_func_946, device=device), (_randn(device, 4, 4), _randn(device, 4, 4))


def seed_946_retrace(device: str):
    """Seed #946 traced first, then the trace's python callable jitted (``thunder.trace()(fn, *args)``)."""
    import functools

    import thunder

    fn, args = seed_946(device)
    trc = thunder.trace()(functools.partial(_func_946, device=device), *args)
    return trc.python_callable(), args


# --- litgpt / nanogpt models -------------------------------------------------------------------


def _litgpt(name: str, device: str, n_layer: int, batch: int, seq: int, **overrides):
    import torch
    from thunder.tests import litgpt_model

    config = litgpt_model.Config.from_name(name, n_layer=n_layer, **overrides)
    with torch.device(device):
        model = litgpt_model.GPT(config).eval().requires_grad_(False)
    idx = torch.randint(0, config.padded_vocab_size, (batch, seq), device=device)
    return model, (idx,)


def llama2_like(device: str):
    return _litgpt("llama2-like", device, n_layer=2, batch=2, seq=32)


def gpt_neox_like(device: str):
    return _litgpt("gpt-neox-like", device, n_layer=2, batch=2, seq=32)


def llama2_like_large(device: str):
    return _litgpt("llama2-like", device, n_layer=8, batch=4, seq=256, n_embd=512, n_head=8, intermediate_size=1376)


def nanogpt_small(device: str):
    import torch
    from thunder.tests import nanogpt_model

    config = nanogpt_model.GPTConfig(block_size=64, vocab_size=320, n_layer=2, n_head=4, n_embd=64, dropout=0.0)
    with torch.device(device):
        model = nanogpt_model.GPT(config).eval().requires_grad_(False)
    idx = torch.randint(0, config.vocab_size, (2, 32), device=device)
    return model, (idx,)


# --- synthetic scaling family --------------------------------------------------------------------

_CHAIN_OPS = ("{prev} * 1.5", "{prev} + 0.25", "torch.tanh({prev})")


def chain_source(n: int) -> str:
    """Source of ``f(x)`` with ``n`` elementwise ops, each result bound to its own user name."""
    lines = ["def f(x):"]
    prev = "x"
    for i in range(n):
        lines.append(f"    v{i} = {_CHAIN_OPS[i % len(_CHAIN_OPS)].format(prev=prev)}")
        prev = f"v{i}"
    lines.append(f"    return {prev}")
    return "\n".join(lines) + "\n"


def make_chain(n: int) -> Callable:
    import torch

    src = chain_source(n)
    filename = f"<bench-chain-{n}>"
    linecache.cache[filename] = (len(src), None, src.splitlines(True), filename)  # so inspect finds it
    namespace: dict[str, Any] = {"torch": torch}
    exec(compile(src, filename, "exec"), namespace)
    return namespace["f"]


def chain(n: int) -> Callable[[str], tuple[Callable, tuple]]:
    def build(device: str):
        return make_chain(n), (_randn(device, 16, 16),)

    build.__name__ = f"chain_{n}"
    return build


WORKLOADS: list[Workload] = [
    Workload("autocast-seed", autocast_seed, tier="quick", compile_rounds=(1, 3)),
    Workload("autocast-chain", autocast_chain, tier="quick", compile_rounds=(1, 3), stock_crash=STOCK_CRASH_283),
    Workload("seed946", seed_946, tier="quick", compile_rounds=(5, 10)),
    Workload("seed946-retrace", seed_946_retrace, tier="quick", compile_rounds=(5, 10)),
    Workload("chain-100", chain(100), tier="quick"),
    Workload("chain-1000", chain(1000), tier="quick", compile_rounds=(1, 3), exec_in_quick=False),
    Workload("chain-10000", chain(10000), tier="full", compile_rounds=(1, 1)),
    Workload("llama2-like", llama2_like, tier="quick", compile_rounds=(1, 3), exec_in_quick=False),
    Workload("gpt-neox-like", gpt_neox_like, compile_rounds=(2, 3)),
    Workload("nanogpt", nanogpt_small, compile_rounds=(2, 3)),
    Workload("llama2-like-large", llama2_like_large, tier="large", compile_rounds=(1, 2)),
]

BY_NAME = {w.name: w for w in WORKLOADS}
