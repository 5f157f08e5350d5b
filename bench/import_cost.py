"""What the overlay adds to start-up and to ``import thunder``, stock and overlay interleaved.

    python bench/import_cost.py [--runs 15] [--no-whole-import] [--files PATH ...] [--cache written|dont-write-bytecode|none]

Start-up: wall time of ``python -c pass`` with the hook active vs THUNDER_OVERLAY=0 (the .pth line
then returns before importing anything), and ``-X importtime`` of the hook's own import.

Patched modules: in each of ``--runs`` fresh processes (thunder imported stock first, so every module the
targets need is loaded, as at the real import), the time stock's import system takes to get the code of
every module the series changes (``SourceFileLoader.get_code``: stat, read and unmarshal each ``.pyc``)
against the overlay's work for the same modules: importing its engine modules afresh (the start-up hook is
already imported), finding and hashing every file, deciding the base, getting the patched code of every
file and registering the patched lines with linecache:
  cold: an empty bytecode cache (read the manifest and series, apply, compile every file, write the
  entry), once: the first process after an install or a thunder upgrade;
  warm: the entry the cold step wrote (verify the key, unmarshal), ``--repeats`` times interleaved with
  stock's step: every later process. Per process the best (minimum) of each counts, as timeit does:
  on a shared machine single steps are stretched by other processes; the first warm step of each
  process is reported too. Wall time and this process's CPU time are both reported.
``--files`` adds a scratch patch to the installed base's series that changes those files too (e.g.
thunder/core/interpreter.py thunder/transforms/autodiff.py; tools/scratch_series.py), in a temporary
THUNDER_OVERLAY_PATCHES folder. ``--cache``: ``written`` (default: a temporary cache folder, bytecode may
be written beside sources), ``dont-write-bytecode`` (the same with PYTHONDONTWRITEBYTECODE=1), ``none``
(no writable cache folder: every step pays the cold cost). The cache folder is removed at the end.

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
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tools"))
import scratch_series  # noqa: E402
from thunder_overlay import locate, manifest  # noqa: E402  (scratch_series puts overlay/ on sys.path)

# Runs in a fresh interpreter with THUNDER_OVERLAY=0: thunder is imported stock, thunder_overlay is not.
PATCHED_CHILD = r"""
import gc, importlib.machinery, json, linecache, sys, time
import thunder  # stock: every module the targets import is loaded now
import thunder_overlay._startup  # imported at interpreter start when the overlay is on

REPEATS, TARGETS = int(sys.argv[1]), sys.argv[2:]  # the modules the series changes

def clocks():
    gc.disable()  # as timeit does: a collection of earlier garbage is no part of either side's cost
    return time.perf_counter(), time.process_time()

def since(start):
    wall, cpu = time.perf_counter(), time.process_time()
    gc.enable()
    return wall - start[0], cpu - start[1]

def stock(targets):
    gc.collect()
    start = clocks()
    for name, origin in targets:
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
    # the targets are imported (stock) in this process: out of sys.modules, so that they are found and
    # decided on as at the first import of thunder
    imported = {m: sys.modules.pop(m) for m in TARGETS if m in sys.modules}
    gc.collect()
    start = clocks()
    from thunder_overlay import config, engine, locate
    locator = locate.Locator()
    plan = engine.plan(locator, locator.spec("thunder"))
    specs = {t.module: engine._spec(t) for t in plan.targets}  # what decide() does
    for t in plan.targets:  # what exec_module does for each, before executing the code
        linecache.lazycache(config.patched_filename(t.origin), {"__name__": t.module, "__loader__": specs[t.module].loader})
    elapsed = since(start)
    sys.modules.update(imported)
    assert plan.state == "patched", plan.report()
    return elapsed, plan.bytecode_cache, [(t.module, t.origin) for t in plan.targets]

cold, cold_cache, targets = overlay()  # the cache folder is empty: read the series, apply, compile, write
assert [m for m, _ in targets] == TARGETS, (targets, TARGETS)
result = {"stock": [stock(targets)], "cold": [cold], "cold_cache": cold_cache, "warm": []}
for _ in range(REPEATS):  # interleaved; each warm step imports the overlay's modules afresh
    warm, result["warm_cache"], _ = overlay()
    result["warm"].append(warm)
    result["stock"].append(stock(targets))
print(json.dumps(result))
"""


def child_env(**extra) -> dict:
    """As a user's environment: bytecode (the overlay's own .pyc, its cache entry) may be written."""
    env = dict(os.environ, PYTHONWARNINGS="ignore", **extra)
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    return env


class Setting:
    """The series (shipped, or with ``--files``) and the cache folder (``--cache``) every child runs with."""

    def __init__(self, files: list[str], cache: str):
        self.folder = Path(tempfile.mkdtemp(prefix="thunder-overlay-import-cost-"))
        self.env = {}
        patches = None
        if files:
            patches = scratch_series.build(self.folder / "patches", files)
            self.env["THUNDER_OVERLAY_PATCHES"] = str(patches)
        base = scratch_series.installed_base(scratch_series.installed_root(), manifest.load(patches))
        self.modules = [locate.module_name(p) for p in base.files]
        self.cache = cache
        if cache == "dont-write-bytecode":
            self.env["PYTHONDONTWRITEBYTECODE"] = "1"
        if cache == "none":  # a path under a file: no folder can be made there
            (self.folder / "a-file").write_text("")
            self.env["THUNDER_OVERLAY_CACHE_DIR"] = str(self.folder / "a-file" / "cache")

    def child_env(self, **extra) -> dict:
        """An empty cache folder per call (--cache none: the uncreatable one instead)."""
        cache = tempfile.mkdtemp(prefix="cache-", dir=self.folder)
        return dict(child_env(THUNDER_OVERLAY_CACHE_DIR=cache, **extra), **self.env)

    def expected(self) -> tuple[str, str]:
        return ("not written", "not written") if self.cache == "none" else ("written: ", "hit: ")

    def close(self) -> None:
        shutil.rmtree(self.folder, ignore_errors=True)


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


def patched_work(runs: int, repeats: int, setting: Setting) -> None:
    results = []
    for i in range(runs):
        proc = subprocess.run([sys.executable, "-c", PATCHED_CHILD, str(repeats), *setting.modules], capture_output=True,
                              text=True, env=setting.child_env(THUNDER_OVERLAY="0"))
        assert proc.returncode == 0, proc.stderr[-3000:]
        result = json.loads(proc.stdout.splitlines()[-1])
        cold, warm = setting.expected()
        assert result["cold_cache"].startswith(cold) and result["warm_cache"].startswith(warm), result
        results.append(result)
        best = {k: min(w for w, _ in result[k]) for k in ("stock", "cold", "warm")}
        print(f"  [{i + 1}/{runs}] best of the process: stock {ms(best['stock'])}, overlay cold {ms(best['cold'])}, "
              f"warm {ms(best['warm'])}", flush=True)
    print(f"{', '.join(setting.modules)}; cache: {setting.cache} ({results[-1]['warm_cache']})")
    for clock, index in (("wall", 0), ("cpu", 1)):
        best = {k: [min(x[index] for x in r[k]) for r in results] for k in ("stock", "cold", "warm")}
        first_warm = [r["warm"][0][index] - r["stock"][0][index] for r in results]
        print(f"code of every patched module ({clock} time), stock (unmarshal the .pyc files): {summary(best['stock'])}")
        print(f"  overlay, first process (empty cache): {summary(best['cold'])}; "
              f"overlay - stock: {summary([c - s for c, s in zip(best['cold'], best['stock'])])}")
        print(f"  overlay, later processes (best of {repeats}): {summary(best['warm'])}; "
              f"overlay - stock: {summary([w - s for w, s in zip(best['warm'], best['stock'])])}")
        print(f"  overlay, later processes, first step in the process - stock's first: {summary(first_warm)}; "
              f"{runs} processes", flush=True)


def whole_import(runs: int, setting: Setting) -> None:
    env = setting.child_env()
    subprocess.run([sys.executable, "-c", "import thunder"], env=dict(env, THUNDER_OVERLAY="1"), check=True,
                   capture_output=True)  # warms the cache
    measure = lambda overlay: importtime_us(dict(env, THUNDER_OVERLAY=overlay), "import thunder", "thunder") / 1e6  # noqa: E731
    compare(f"import thunder (-X importtime, cumulative, cache: {setting.cache})", measure, runs)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=15, help="processes (or interleaved pairs) per measurement")
    parser.add_argument("--repeats", type=int, default=5,
                        help="warm-cache and stock steps per process, interleaved (the best of them counts)")
    parser.add_argument("--no-whole-import", action="store_true",
                        help="skip the whole `import thunder` comparison (the slowest and noisiest part)")
    parser.add_argument("--files", nargs="*", default=[], metavar="PATH",
                        help="files of thunder a scratch patch adds to the series (thunder/core/interpreter.py ...)")
    parser.add_argument("--cache", choices=("written", "dont-write-bytecode", "none"), default="written",
                        help="a writable cache folder (with PYTHONDONTWRITEBYTECODE=1), or none")
    parser.add_argument("--no-start-up", action="store_true", help="skip the interpreter start-up measurements")
    args = parser.parse_args(argv)
    setting = Setting(args.files, args.cache)
    try:
        return measure_all(args, setting)
    finally:
        setting.close()


def measure_all(args, setting: Setting) -> int:
    if not args.no_start_up:
        compare("interpreter start-up (python -c pass)", startup_seconds, args.runs * 2)
        hooks = [importtime_us(child_env(THUNDER_OVERLAY="1"), "pass", "thunder_overlay") / 1e6
                 for _ in range(args.runs)]
        print(f"start-up hook import (-X importtime): {summary(hooks)}", flush=True)
    patched_work(args.runs, args.repeats, setting)
    if not args.no_whole_import:
        whole_import(args.runs, setting)
    return 0


if __name__ == "__main__":
    sys.exit(main())
