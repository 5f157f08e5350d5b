"""A program's variable may take any name, even one thunder gives a proxy itself: C0 and C1 crashed stock
thunder.jit with gradients. The names come from thunder's own code, not from a list kept here."""

from __future__ import annotations

import ast
from functools import cache
from pathlib import Path

import pytest
import torch
import thunder

from conftest import requires_overlay, run_python

PROGRAM = """
def f(x, w):
    {name} = x @ w
    return torch.tanh({name}) * w
"""

AUTOCAST_PROGRAM = """
def f(x, w):
    with torch.autocast("cpu", dtype=torch.bfloat16):
        {name} = x @ w
    return torch.tanh({name}) * w
"""


def _fixed_name(call: ast.Call) -> str | None:
    func = call.func
    callee = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
    if not (callee.endswith("Proxy") or callee in ("proxy", "unpack_trivial")):
        return None
    for keyword in call.keywords:
        if keyword.arg == "name" and isinstance(keyword.value, ast.Constant) and isinstance(keyword.value.value, str):
            return keyword.value.value
    return None


@cache
def names_thunder_fixes() -> tuple[str, ...]:
    """Every literal name thunder's package (its tests and benchmarks aside) passes to a proxy constructor or to
    prims.unpack_trivial: the names thunder gives proxies whatever the trace already holds."""
    root = Path(thunder.__file__).parent
    found = set()
    for path in root.rglob("*.py"):
        if path.relative_to(root).parts[0] in ("tests", "benchmarks"):
            continue
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Call) and (name := _fixed_name(node)) is not None:
                found.add(name)
    return tuple(sorted(found))


def build(template: str, name: str):
    namespace = {"torch": torch}
    exec(compile(template.format(name=name), f"<user program with {name}>", "exec"), namespace)
    return namespace["f"]


def test_the_names_are_found_in_thunder():
    # Every release names the prologue's cache_info; those with thunder/transforms/autodiff.py the backward inputs
    names = names_thunder_fixes()
    assert "cache_info" in names
    if (Path(thunder.__file__).parent / "transforms" / "autodiff.py").is_file():
        assert {"C0", "C1", "saved_for_backward", "cotangents"} <= set(names)


@requires_overlay
@pytest.mark.parametrize("mode", ["plain", "grad", "autocast"])
@pytest.mark.parametrize("name", names_thunder_fixes())
def test_a_variable_named_like_a_proxy_thunder_names(name, mode):
    f = build(AUTOCAST_PROGRAM if mode == "autocast" else PROGRAM, name)
    x = torch.randn(3, 3)
    w = torch.randn(3, 3, requires_grad=mode != "plain")
    jf = thunder.jit(f)
    actual, expected = jf(x, w), f(x, w)
    tolerance = {"rtol": 2e-2, "atol": 2e-2} if mode == "autocast" else {}
    torch.testing.assert_close(actual, expected, **tolerance)
    if mode != "plain":
        go = torch.ones_like(actual)
        (got,), (want,) = torch.autograd.grad(actual, w, go), torch.autograd.grad(expected, w, go)
        torch.testing.assert_close(got, want, **tolerance)
    traces = [thunder.last_traces(jf)[-1]] + ([thunder.last_backward_traces(jf)[-1]] if mode != "plain" else [])
    for trace in traces:
        # no proxy of the program took the name: where it appears, it is thunder's own
        for bsym in trace.bound_symbols:
            for p in bsym.flat_proxy_outs:
                assert p.name != name or not isinstance(p, thunder.TensorProxy), (name, str(bsym))


STOCK_CHILD = """
import torch, thunder
namespace = {"torch": torch}
exec(PROGRAM, namespace)
w = torch.randn(3, 3, requires_grad=True)
try:
    namespace["f"](torch.randn(3, 3), w)
    thunder.jit(namespace["f"])(torch.randn(3, 3), w).sum().backward()
    print("RESULT ok")
except Exception as e:
    print("RESULT", type(e).__name__, e)
"""


@pytest.mark.parametrize("name", ["C0", "C1"])
def test_stock_crashes_where_the_overlay_does_not(name):
    if name not in names_thunder_fixes():
        pytest.skip(f"this thunder does not name a proxy {name} itself (no thunder/transforms/autodiff.py)")
    stock = run_python(f"PROGRAM = {PROGRAM.format(name=name)!r}", STOCK_CHILD, overlay="0", timeout=300)
    result = [line for line in stock.stdout.splitlines() if line.startswith("RESULT")]
    assert result == [f"RESULT RuntimeError Trying to add the name {name} to a trace, but that name is already used"], (
        stock.stdout[-2000:] + stock.stderr[-2000:])
