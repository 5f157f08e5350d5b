"""What the overlay adds to start-up and to ``import thunder``, stock and overlay interleaved.

    python tools/import_cost.py [--runs 15]

Start-up: wall time of ``python -c pass`` with the hook active vs THUNDER_OVERLAY=0 (the .pth line
then returns before importing anything). Import: ``python -X importtime -c "import thunder"``, the
cumulative microseconds of the top-level ``thunder`` entry. Prints medians and the overlay - stock
difference of each interleaved pair (median, min, max).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time


def startup_seconds(overlay: str) -> float:
    env = dict(os.environ, THUNDER_OVERLAY=overlay)
    start = time.perf_counter()
    subprocess.run([sys.executable, "-c", "pass"], env=env, check=True)
    return time.perf_counter() - start


def thunder_import_seconds(overlay: str) -> float:
    env = dict(os.environ, THUNDER_OVERLAY=overlay, PYTHONWARNINGS="ignore")
    proc = subprocess.run([sys.executable, "-X", "importtime", "-c", "import thunder"], env=env,
                          capture_output=True, text=True, check=True)
    for line in proc.stderr.splitlines():
        parts = [p.strip() for p in line.removeprefix("import time:").split("|")]
        if len(parts) == 3 and parts[2] == "thunder":
            return int(parts[1]) / 1e6
    raise RuntimeError("no 'thunder' line in -X importtime output")


def hook_import_seconds() -> float:
    """Cumulative -X importtime of the start-up hook's import (thunder_overlay and its _startup)."""
    env = dict(os.environ, THUNDER_OVERLAY="1")
    proc = subprocess.run([sys.executable, "-X", "importtime", "-c", "pass"], env=env, capture_output=True,
                          text=True, check=True)
    total = 0
    for line in proc.stderr.splitlines():
        parts = [p.strip() for p in line.removeprefix("import time:").split("|")]
        if len(parts) == 3 and parts[2] == "thunder_overlay":  # top-level entry, includes _startup
            total += int(parts[1])
    return total / 1e6


def patch_work_seconds() -> tuple[float, float]:
    """In-process: (what the overlay does at jit_ext import: verify + patch + compile, what stock does:
    read and unmarshal the cached bytecode)."""
    import importlib.util
    import marshal
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "overlay"))
    from thunder_overlay import finder

    origin = Path(importlib.util.find_spec("thunder").origin).parent / "core" / "jit_ext.py"
    start = time.perf_counter()
    plan = finder.plan(origin)
    compile(plan.patched_text, "jit_ext.py", "exec", dont_inherit=True)
    overlay = time.perf_counter() - start
    start = time.perf_counter()
    marshal.loads(Path(importlib.util.cache_from_source(str(origin))).read_bytes()[16:])
    return overlay, time.perf_counter() - start


def compare(name: str, measure, runs: int) -> None:
    diffs, stock, overlay = [], [], []
    for _ in range(runs):
        s, o = measure("0"), measure("1")
        stock.append(s)
        overlay.append(o)
        diffs.append(o - s)
    ms = lambda x: f"{x * 1e3:7.1f} ms"  # noqa: E731
    print(f"{name}: stock {ms(statistics.median(stock))}, overlay {ms(statistics.median(overlay))}, "
          f"overlay - stock per pair: median {ms(statistics.median(diffs))} "
          f"(min {ms(min(diffs))}, max {ms(max(diffs))}), {runs} pairs")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=15)
    args = parser.parse_args(argv)
    compare("interpreter start-up (python -c pass)", startup_seconds, args.runs * 2)
    hooks = sorted(hook_import_seconds() for _ in range(args.runs))
    print(f"start-up hook import (-X importtime): median {statistics.median(hooks) * 1e3:.2f} ms, max {hooks[-1] * 1e3:.2f} ms")
    work = [patch_work_seconds() for _ in range(args.runs)]
    diffs = sorted(o - s for o, s in work)
    print(f"jit_ext import, overlay work (verify + patch + compile) - stock (unmarshal .pyc): "
          f"median {statistics.median(diffs) * 1e3:.1f} ms (min {diffs[0] * 1e3:.1f}, max {diffs[-1] * 1e3:.1f})")
    compare("import thunder (-X importtime, cumulative)", thunder_import_seconds, args.runs)
    return 0


if __name__ == "__main__":
    sys.exit(main())
