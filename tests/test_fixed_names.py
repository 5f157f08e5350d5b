"""A program's variable may take any name, even one thunder gives a proxy itself: C0 and C1 crashed stock
thunder.jit with gradients. Where stock fails on such a name, the overlay keeps it off the program's values;
everywhere else the value takes it, as on stock. The names come from thunder's own code, and which of them
stock fails on from stock itself, not from lists kept here."""

from __future__ import annotations

import ast
from functools import cache
from pathlib import Path

import pytest
import torch
import thunder

from conftest import requires_overlay, run_python

# The value is saved for the backward (the product's gradient needs it), as some releases fail only then
PROGRAM = """
def f(x, w):
    {name} = x @ w
    return {name} * w
"""

AUTOCAST_PROGRAM = """
def f(x, w):
    with torch.autocast("cpu", dtype=torch.bfloat16):
        {name} = x @ w
    return {name} * w
"""


def _string(node: ast.AST) -> str | None:
    return node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else None


def _is_a_proxys_name(node: ast.AST) -> bool:
    # bsym.args[0].name, or bsym.kwargs["name"] (not bsym.sym.name or os.name)
    return (isinstance(node, ast.Attribute) and node.attr == "name" and isinstance(node.value, ast.Subscript)) or (
        isinstance(node, ast.Subscript) and _string(node.slice) == "name"
        and isinstance(node.value, ast.Attribute) and node.value.attr == "kwargs")


def _fixed_name(node: ast.AST) -> str | None:
    """The name in `SomeProxy(..., name="C0")` or `unpack_trivial(..., name=...)`, and in the checks thunder makes
    of names it gives (`bsym.args[0].name == "C0"`, 0.2.1's backward trace)."""
    if isinstance(node, ast.Call):
        func = node.func
        callee = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
        if callee.endswith("Proxy") or callee in ("proxy", "unpack_trivial"):
            return next((_string(k.value) for k in node.keywords if k.arg == "name" and _string(k.value)), None)
    if isinstance(node, ast.Compare) and len(node.ops) == 1 and isinstance(node.ops[0], ast.Eq):
        left, right = node.left, node.comparators[0]
        if _is_a_proxys_name(left) and _string(right):
            return _string(right)
    return None


@cache
def names_thunder_fixes() -> tuple[str, ...]:
    """Every literal name thunder's package (its tests and benchmarks aside) passes to a proxy constructor or to
    prims.unpack_trivial, or asserts a proxy has: the names thunder gives proxies whatever the trace holds."""
    root = Path(thunder.__file__).parent
    found = set()
    for path in root.rglob("*.py"):
        if path.relative_to(root).parts[0] in ("tests", "benchmarks"):
            continue
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if (name := _fixed_name(node)) is not None and name.isidentifier():
                found.add(name)
    return tuple(sorted(found))


def build(template: str, name: str):
    namespace = {"torch": torch}
    exec(compile(template.format(name=name), f"<user program with {name}>", "exec"), namespace)
    return namespace["f"]


def test_the_names_are_found_in_thunder():
    # Every release names the prologue's cache_info and the backward trace's inputs
    assert {"cache_info", "C0", "C1", "saved_for_backward"} <= set(names_thunder_fixes())


STOCK_CHILD = """
import torch, thunder
for name in NAMES:
    namespace = {"torch": torch}
    exec(PROGRAM.format(name=name), namespace)
    w = torch.randn(3, 3, requires_grad=True)
    try:
        thunder.jit(namespace["f"])(torch.randn(3, 3), w).sum().backward()
        print("RESULT", name, "ok")
    except Exception as e:
        print("RESULT", name, type(e).__name__, str(e).replace(chr(10), " "))
"""


@pytest.fixture(scope="module")
def stock_with_gradients() -> dict[str, str]:
    """Per name, how stock thunder ends the program with gradients: "ok" or the exception."""
    names = names_thunder_fixes()
    stock = run_python(f"NAMES = {list(names)!r}; PROGRAM = {PROGRAM!r}", STOCK_CHILD, overlay="0", timeout=600)
    results = dict(line.split(" ", 2)[1:] for line in stock.stdout.splitlines() if line.startswith("RESULT "))
    assert set(results) == set(names), stock.stdout[-2000:] + stock.stderr[-2000:]
    return results


def test_stock_fails_on_some_of_them(stock_with_gradients):
    # Which names stock fails on depends on the release: C0 and C1 on 0.2.6, saved_for_backward too on 0.2.1
    # (whose source has no cotangents literal for names_thunder_fixes to find)
    failed = {n for n, r in stock_with_gradients.items() if r != "ok"}
    assert {"C0", "C1"} <= failed, stock_with_gradients
    assert "cache_info" not in failed, stock_with_gradients


# The backward trace's inputs, which share the forward trace's names: the series reserves them (patch 0006)
BACKWARD_INPUTS = {"C0", "C1", "saved_for_backward", "cotangents"}


@requires_overlay
@pytest.mark.parametrize("mode", ["plain", "grad", "autocast"])
@pytest.mark.parametrize("name", names_thunder_fixes())
def test_a_variable_named_like_a_proxy_thunder_names(name, mode, stock_with_gradients):
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
    if name in BACKWARD_INPUTS or (mode != "plain" and stock_with_gradients[name] != "ok"):
        # the name is reserved, or stock fails on it: no proxy of the program takes it; where it appears, it is
        # thunder's own
        backward = thunder.last_backward_traces(jf)[-1:] if mode != "plain" else []
        for trace in (thunder.last_traces(jf)[-1], *backward):
            for bsym in trace.bound_symbols:
                for p in bsym.flat_proxy_outs:
                    assert p.name != name or not isinstance(p, thunder.TensorProxy), (name, str(bsym))
    elif not _held_by_the_prologue(jf, name):  # the traces share one namespace (the overlay's, not stock's)
        computed = {p.name for bsym in thunder.last_traces(jf)[0].bound_symbols for p in bsym.flat_proxy_outs}
        assert name in computed, (name, mode, sorted(computed))


def _held_by_the_prologue(jf, name: str) -> bool:
    prologue = thunder.last_prologue_traces(jf)[-1]
    return any(p.name == name for bsym in prologue.bound_symbols for p in bsym.flat_proxy_outs)
