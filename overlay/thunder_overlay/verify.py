"""``thunder-overlay verify``: run every reproducer under stock thunder and under the overlay.

Each program runs in its own process (THUNDER_OVERLAY=0, then 1), so the two sides never share an
imported thunder. Prints a side-by-side table; the exit code is non-zero when the overlay fails any.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor

from thunder_overlay import config
from thunder_overlay.reproducers import PROGRAMS, load

TIMEOUT_S = 600


def run_program(name: str, overlay: bool) -> tuple[bool, str, float, str]:
    """(passed, its last line or why not, seconds, everything it printed)."""
    env = dict(os.environ, THUNDER_OVERLAY="1" if overlay else "0", PYTHONWARNINGS="ignore")
    start = time.perf_counter()
    try:
        proc = subprocess.run(
            [sys.executable, "-c", f"import thunder_overlay.reproducers as r; r.main({name!r})"],
            env=env, capture_output=True, text=True, timeout=TIMEOUT_S,
        )
    except subprocess.TimeoutExpired:
        return False, f"timed out after {TIMEOUT_S} s", time.perf_counter() - start, ""
    elapsed = time.perf_counter() - start
    output = proc.stdout + proc.stderr
    lines = [line for line in output.splitlines() if line.strip()]
    last = lines[-1].strip() if lines else f"exit code {proc.returncode}"
    expected_states = tuple(f"[{s}]" for s in config.PATCHED_STATES) if overlay else ("[disabled]",)
    if proc.returncode == 0 and not last.startswith(expected_states):
        return False, f"ran, but the overlay state was not {' or '.join(expected_states)}: {last}", elapsed, output
    return proc.returncode == 0, last, elapsed, output


def _cell(ok: bool, detail: str, width: int = 48) -> str:
    text = ("pass" if ok else "FAIL") + (": " + detail if not ok else "")
    return text if len(text) <= width else text[: width - 3] + "..."


def main(programs=PROGRAMS, jobs: int = 2, full: bool = False) -> int:
    print(f"verify: {len(programs)} programs, stock (THUNDER_OVERLAY=0) and overlay, {jobs} at a time", flush=True)
    tasks = [(name, overlay) for name in programs for overlay in (False, True)]
    results = {}
    with ThreadPoolExecutor(jobs) as pool:
        futures = {task: pool.submit(run_program, *task) for task in tasks}
        for i, (task, future) in enumerate(futures.items(), start=1):
            results[task] = future.result()
            ok, _, elapsed, _ = results[task]
            side = "overlay" if task[1] else "stock"
            print(f"  [{i}/{len(tasks)}] {task[0]} ({side}): {'pass' if ok else 'fail'} in {elapsed:.1f} s", flush=True)

    header = f"{'program':<22} {'stock':<48} {'overlay':<48} {'time stock/overlay':>18}"
    print("\n" + header + "\n" + "-" * len(header))
    failed = []
    for name in programs:
        (s_ok, s_detail, s_t, _), (o_ok, o_detail, o_t, _) = results[(name, False)], results[(name, True)]
        print(f"{name:<22} {_cell(s_ok, s_detail):<48} {_cell(o_ok, o_detail):<48} {s_t:>8.1f}s/{o_t:.1f}s")
        if not o_ok:
            failed.append((name, o_detail))
    for name in programs:
        why = getattr(load(name), "STOCK_PASSES", None)
        if why and results[(name, False)][0]:
            print(f"\n{name} passes on stock: {why}")
    for (name, overlay), (ok, _, _, output) in results.items() if full else ():
        if not ok:
            side = "overlay" if overlay else "stock"
            print(f"\n--- {name} ({side}), everything it printed:\n{output.rstrip()}")
    for name, detail in failed:
        print(f"\noverlay FAILED {name}: {detail}")
    print(f"\n{len(programs) - len(failed)} of {len(programs)} programs pass with the overlay")
    return 1 if failed else 0
