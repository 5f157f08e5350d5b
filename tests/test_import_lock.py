"""`import thunder` never hangs while other threads import: the overlay decides outside the global import
lock. Real thunder, fresh processes, each with a timeout: a hang is a failed test, never a stuck run."""

import itertools
import subprocess
from concurrent.futures import ThreadPoolExecutor

import pytest

from conftest import last_json, run_python

# A thread imports a standard module for the first time while the main thread imports thunder (the first
# import of a module of thunder is where the overlay decides). Before the fix the finder decided inside
# find_spec, under the global import lock, and the decision's own imports waited for the thread's module
# lock while the thread waited for the global lock: 6 of 6 runs of this hung on 0.2.6.
RACE = """
import sys, threading, time
module, delay = MODULE, DELAY
assert module not in sys.modules, module + " is imported at start-up: no race"
threading.Thread(target=__import__, args=(module,)).start()
time.sleep(delay)
import thunder, thunder_overlay
print(thunder_overlay.status()["state"])
"""

MODULES = ("json", "tempfile", "pathlib", "re")


def race(module: str, delay: float, cache: str) -> str:
    try:
        proc = run_python(f"MODULE, DELAY = {module!r}, {delay!r}", RACE, env={"THUNDER_OVERLAY_CACHE_DIR": cache},
                          timeout=90)
    except subprocess.TimeoutExpired:
        return f"{module}, delay {delay * 1e3:.2f} ms: hung (killed after 90 s)"
    lines = proc.stdout.split()
    if proc.returncode != 0 or lines[-1:] != ["patched"]:
        return f"{module}, delay {delay * 1e3:.2f} ms: exit {proc.returncode}, {proc.stdout[-200:]} {proc.stderr[-800:]}"
    return ""


def races(tries: list[tuple[str, float]], cache: str) -> list[str]:
    with ThreadPoolExecutor(2) as pool:
        return [r for r in pool.map(lambda t: race(*t, cache), tries) if r]


def test_the_decision_runs_outside_the_global_import_lock(tmp_path):
    # The cause, checked where it happens: while the engine decides (a warm and a cold decision), is the
    # global import lock held? (_imp.lock_held() is True while any thread holds it.)
    probe = """
    import _imp, json, sys
    from thunder_overlay import engine
    decide, held = engine.decide, []
    def watched(finder):
        held.append(_imp.lock_held())
        return decide(finder)
    engine.decide = watched
    import thunder, thunder_overlay
    print(json.dumps({"held": held, "state": thunder_overlay.status()["state"]}))
    """
    for _ in ("cold", "warm"):
        out = last_json(run_python(probe, env={"THUNDER_OVERLAY_CACHE_DIR": str(tmp_path)}))
        assert out == {"held": [False], "state": "patched"}, out


@pytest.mark.slow
def test_import_thunder_while_a_thread_imports_a_standard_module(tmp_path):
    assert races([(m, 0.0005) for m in MODULES], str(tmp_path)) == []


@pytest.mark.slow
def test_import_thunder_while_a_thread_imports_never_hangs_over_many_tries(tmp_path):
    # 56 processes: every module with delays from 0 to 3 ms, so that the thread's import overlaps every
    # part of the decision (a warm decision takes a few milliseconds).
    delays = [i * 0.0002 for i in range(14)] + [0.003]
    tries = list(itertools.islice(itertools.cycle(itertools.product(MODULES, delays)), 56))
    assert races(tries, str(tmp_path)) == []
