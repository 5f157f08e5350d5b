"""What the overlay adds to start-up and to ``import thunder``, stock and overlay interleaved.

    python bench/import_cost.py [--runs 15] [--no-whole-import]

Start-up: wall time of ``python -c pass`` with the hook active vs THUNDER_OVERLAY=0 (the .pth line
then returns before importing anything), and ``-X importtime`` of the hook's own import.

jit_ext: in each of ``--runs`` fresh processes (thunder imported stock first, so every module jit_ext
needs is loaded, as at the real import), the time stock's import system takes to get jit_ext's code
(``SourceFileLoader.get_code``: stat, read and unmarshal the ``.pyc``) against the overlay's work for the
same module: importing its engine modules afresh (the start-up hook is already imported), identifying
the base (sha256), getting the patched code and registering the patched lines with linecache:
  cold: an empty bytecode cache (read the manifest and series, apply, compile, write the entry), once;
  warm: the entry written by the cold step (verify the sha256 and the key, unmarshal), ``--repeats``
  times interleaved with stock's step. Per process the best (minimum) of each counts, as timeit does:
  on a shared machine single steps are stretched by other processes; the first warm step of each
  process is reported too. Wall time and this process's CPU time are both reported.
The bytecode cache lives in a temporary folder, removed at the end.

Whole import: ``python -X importtime -c "import thunder"``, the cumulative microseconds of the top-level
``thunder`` entry, overlay (warm cache) vs stock, interleaved; dominated by the machine's noise.
Prints medians and the overlay - stock difference of each pair (median, min, max).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

# Runs in a fresh interpreter with THUNDER_OVERLAY=0: thunder is imported stock, thunder_overlay is not.
JIT_EXT_CHILD = r"""
import gc, importlib.machinery, importlib.util, json, linecache, sys, time
from pathlib import Path
import thunder  # stock: every module that jit_ext imports is loaded now
import thunder_overlay._startup  # imported at interpreter start when the overlay is on

name = "thunder.core.jit_ext"
origin = importlib.util.find_spec(name).origin
REPEATS = int(sys.argv[1])

def clocks():
    gc.disable()  # as timeit does: a collection of earlier garbage is no part of either side's cost
    return time.perf_counter(), time.process_time()

def since(start):
    wall, cpu = time.perf_counter(), time.process_time()
    gc.enable()
    return wall - start[0], cpu - start[1]

def stock():
    gc.collect()
    start = clocks()
    importlib.machinery.SourceFileLoader(name, origin).get_code(name)
    return since(start)

def overlay():
    at_start_up = ("thunder_overlay._startup", "thunder_overlay.config")
    for module in [m for m in sys.modules if m.startswith("thunder_overlay.") and m not in at_start_up]:
        del sys.modules[module]  # import them afresh each time, as the first patched import does
        if hasattr(thunder_overlay, module.rsplit(".", 1)[1]):
            delattr(thunder_overlay, module.rsplit(".", 1)[1])
    for filename in [f for f in linecache.cache if f.endswith("(patched by thunder-overlay)")]:
        del linecache.cache[filename]  # frees the previous step's code here, not inside the next timing
    gc.collect()
    start = clocks()
    from thunder_overlay import engine
    plan = engine.plan(Path(origin), origin)
    loader = engine.PatchedSourceLoader(name, origin, plan.patched_text, plan.code)  # what exec_module does
    linecache.lazycache(engine.patched_filename(origin), {"__name__": name, "__loader__": loader})
    elapsed = since(start)
    assert plan.state == "patched", plan.report()
    return elapsed, plan.bytecode_cache

result = {"stock": [stock()]}
cold, result["cold_cache"] = overlay()  # the cache folder is empty: read the series, apply, compile, write
result["cold"] = [cold]
result["warm"] = []
for _ in range(REPEATS):  # interleaved; each warm step imports the overlay's modules afresh
    warm, result["warm_cache"] = overlay()
    result["warm"].append(warm)
    result["stock"].append(stock())
print(json.dumps(result))
"""


def child_env(**extra) -> dict:
    """As a user's environment: bytecode (the overlay's own .pyc, its cache entry) may be written."""
    env = dict(os.environ, PYTHONWARNINGS="ignore", **extra)
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    return env


def startup_seconds(overlay: str) -> float:
    env = child_env(THUNDER_OVERLAY=overlay)
    start = time.perf_counter()
    subprocess.run([sys.executable, "-c", "pass"], env=env, check=True)
    return time.perf_counter() - start


def importtime_us(env: dict, code: str, module: str) -> int:
    proc = subprocess.run([sys.executable, "-X", "importtime", "-c", code], env=env, capture_output=True, text=True,
                          check=True)
    total = 0
    for line in proc.stderr.splitlines():
        parts = [p.strip() for p in line.removeprefix("import time:").split("|")]
        if len(parts) == 3 and parts[2] == module:
            total += int(parts[1])
    return total


def ms(seconds: float) -> str:
    return f"{seconds * 1e3:.2f} ms"


def summary(values: list[float]) -> str:
    return f"median {ms(statistics.median(values))} (min {ms(min(values))}, max {ms(max(values))})"


def compare(name: str, measure, runs: int) -> None:
    diffs, stock, overlay = [], [], []
    for _ in range(runs):
        s, o = measure("0"), measure("1")
        stock.append(s)
        overlay.append(o)
        diffs.append(o - s)
    print(f"{name}: stock {ms(statistics.median(stock))}, overlay {ms(statistics.median(overlay))}, "
          f"overlay - stock per pair: {summary(diffs)}, {runs} pairs", flush=True)


def jit_ext_work(runs: int, repeats: int) -> None:
    results = []
    for i in range(runs):
        cache = tempfile.mkdtemp(prefix="thunder-overlay-import-cost-")
        try:
            proc = subprocess.run([sys.executable, "-c", JIT_EXT_CHILD, str(repeats)], capture_output=True, text=True,
                                  check=True, env=child_env(THUNDER_OVERLAY="0", THUNDER_OVERLAY_CACHE_DIR=cache))
        finally:
            shutil.rmtree(cache, ignore_errors=True)
        result = json.loads(proc.stdout.splitlines()[-1])
        assert result["cold_cache"].startswith("written: ") and result["warm_cache"].startswith("hit: "), result
        results.append(result)
        best = {k: min(w for w, _ in result[k]) for k in ("stock", "cold", "warm")}
        print(f"  [{i + 1}/{runs}] best of the process: stock {ms(best['stock'])}, overlay cold {ms(best['cold'])}, "
              f"warm {ms(best['warm'])}", flush=True)
    for clock, index in (("wall", 0), ("cpu", 1)):
        best = {k: [min(x[index] for x in r[k]) for r in results] for k in ("stock", "cold", "warm")}
        first_warm = [r["warm"][0][index] - r["stock"][0][index] for r in results]
        print(f"jit_ext code ({clock} time), stock (unmarshal the .pyc): {summary(best['stock'])}")
        print(f"  overlay cold cache (once per process): {summary(best['cold'])}; "
              f"overlay - stock: {summary([c - s for c, s in zip(best['cold'], best['stock'])])}")
        print(f"  overlay warm cache (best of {repeats}): {summary(best['warm'])}; "
              f"overlay - stock: {summary([w - s for w, s in zip(best['warm'], best['stock'])])}")
        print(f"  overlay warm cache, first in the process - stock's first: {summary(first_warm)}; "
              f"{runs} processes", flush=True)


def whole_import(runs: int) -> None:
    cache = tempfile.mkdtemp(prefix="thunder-overlay-import-cost-")
    try:
        env = child_env(THUNDER_OVERLAY_CACHE_DIR=cache)
        subprocess.run([sys.executable, "-c", "import thunder"], env=dict(env, THUNDER_OVERLAY="1"), check=True,
                       capture_output=True)  # warms the cache
        measure = lambda overlay: importtime_us(dict(env, THUNDER_OVERLAY=overlay), "import thunder", "thunder") / 1e6  # noqa: E731
        compare("import thunder (-X importtime, cumulative, warm cache)", measure, runs)
    finally:
        shutil.rmtree(cache, ignore_errors=True)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=15, help="processes (or interleaved pairs) per measurement")
    parser.add_argument("--repeats", type=int, default=5,
                        help="warm-cache and stock steps per jit_ext process, interleaved (the best of them counts)")
    parser.add_argument("--no-whole-import", action="store_true",
                        help="skip the whole `import thunder` comparison (the slowest and noisiest part)")
    args = parser.parse_args(argv)
    compare("interpreter start-up (python -c pass)", startup_seconds, args.runs * 2)
    hooks = [importtime_us(child_env(THUNDER_OVERLAY="1"), "pass", "thunder_overlay") / 1e6
             for _ in range(args.runs)]
    print(f"start-up hook import (-X importtime): {summary(hooks)}", flush=True)
    jit_ext_work(args.runs, args.repeats)
    if not args.no_whole_import:
        whole_import(args.runs)
    return 0


if __name__ == "__main__":
    sys.exit(main())
