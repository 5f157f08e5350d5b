"""Compile-time and execution-time benchmarks of thunder.jit over the workloads of workloads.py.

* ``test_compile``: a fresh ``thunder.jit`` object per round (no cache hit), timed to its first
  result; the workload is rebuilt in the untimed setup.
* ``test_exec``: steady-state call time of a warmed-up jitted callable (the one the compile
  benchmark left behind, when it ran).

Cases are generated in conftest.py; CUDA timings synchronize inside the timed function.
"""

from __future__ import annotations

import pytest

import targets

_compiled: dict[tuple[str, str], tuple] = {}  # (workload, target) -> (jitted fn, args) of the last compile round
_crashed: set[tuple[str, str]] = set()  # (workload, target) whose compile crashed; exec need not try again


def _jit(target: targets.Target, fn):
    import thunder

    return thunder.jit(fn, executors=list(target.executors))


def _skip_known_crash(w, overlay_info: dict) -> None:
    """Turn the crash of a program stock thunder is known to crash on into a skip; else return."""
    if w.stock_crash is None:
        return
    if overlay_info["side"] == "stock":
        pytest.skip(w.stock_crash)
    if overlay_info["state"] != "patched":  # overlay requested but not active: thunder is stock
        pytest.skip(f"{w.stock_crash} [overlay state: {overlay_info['state']}]")


def test_compile(benchmark, case, mode, overlay_info):
    w, target = case[0], targets.resolve(case[1])

    def setup():
        return w.build(target.device), {}

    def first_call(fn, args):
        jfn = _jit(target, fn)
        jfn(*args)
        target.sync()
        return jfn, args

    rounds = w.compile_rounds[0 if mode == "quick" else 1]
    try:
        result = benchmark.pedantic(first_call, setup=setup, rounds=rounds, iterations=1)
    except Exception:
        _crashed.add((w.name, target.name))
        _skip_known_crash(w, overlay_info)
        raise
    _compiled[(w.name, target.name)] = result


def test_exec(benchmark, case, overlay_info):
    w, target = case[0], targets.resolve(case[1])
    if (w.name, target.name) in _crashed:
        _skip_known_crash(w, overlay_info)
    jfn, args = _compiled.pop((w.name, target.name), (None, None))
    if jfn is None:
        fn, args = w.build(target.device)
        jfn = _jit(target, fn)
        try:
            jfn(*args)
        except Exception:
            _skip_known_crash(w, overlay_info)
            raise
    for _ in range(3):
        jfn(*args)
    target.sync()

    def call():
        jfn(*args)
        target.sync()

    benchmark(call)
