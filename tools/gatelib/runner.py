"""Runs one side (stock or overlay) of one unit in a pytest subprocess, or reuses a complete earlier run.

A unit's outcomes go to the outcome store (DIR/<side>.outcomes, gatelib/store.py) as soon as it finishes, under
its key (Runner.key: what decides its outcomes); a later run reuses them while the key matches: the stock side by
default, the overlay side with --resume. Each run also writes DIR/raw/<unit>-<side>[-confirm]-<tag>.jsonl (the
plugin's lines between the driver's header and trailer) and a .log beside it, for debugging; the tag is a hash
of the selection. Only the runs the store does not hold (the confirming reruns, --collect-only) are reused from
raw/, with --resume (see reusable()).
"""

import datetime
import json
import os
import subprocess
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from gatelib import store
from gatelib.outcomes import ids_digest, ordinary_exit, parts_of, read_run
from gatelib.plan import file_sha256, module_file, selection_tag
from gatelib.plugin import PLUGIN_VERSION

TOOLS = Path(__file__).resolve().parents[1]
SIDES = ("stock", "overlay")


def probe(python, env):
    """The thunder, torch, tests directory and overlay a side's environment imports (gatelib.plan.probe_here)."""
    code = "import json, gatelib.plan as p; print('GATE-PROBE', json.dumps(p.probe_here()))"
    proc = subprocess.run([python, "-c", code], env=env, capture_output=True, text=True, check=False,
                          cwd=tempfile.gettempdir())
    for line in proc.stdout.splitlines():
        if line.startswith("GATE-PROBE "):
            return json.loads(line[len("GATE-PROBE "):])
    raise RuntimeError(f"cannot import thunder with {python}: {proc.stderr.strip().splitlines()[-1:] or proc.stdout}")


class Runner:
    """Runs units for one gate invocation. `current` says which run is on (unit, side, path, t0, rerun), for the
    progress line. raw_dir (and store_dir, by default the folder above it) are set by the caller once it knows
    the output folder (it names thunder's version)."""

    def __init__(self, args, raw_dir=None, probes=None, store_dir=None):
        self.args = args
        self.raw_dir = Path(raw_dir) if raw_dir else None
        self.store_dir = Path(store_dir) if store_dir else self.raw_dir.parent if self.raw_dir else None
        self.current = None
        if probes is None:  # both sides at once: each is an `import thunder` of several seconds
            with ThreadPoolExecutor(2) as pool:
                probes = dict(zip(SIDES, pool.map(lambda side: probe(args.python, self.env(side)), SIDES)))
        self.probes = probes
        self.workers = {}  # module -> xdist workers, where it differs from -n (small modules: 0)

    def env(self, side, out=None, unit=None, ids_file=None):
        a = self.args
        paths = [a.overlay_pythonpath] if side == "overlay" and a.overlay_pythonpath else []
        paths += [a.pythonpath] if a.pythonpath else []
        paths += [str(TOOLS)] + ([os.environ["PYTHONPATH"]] if os.environ.get("PYTHONPATH") else [])
        env = dict(os.environ, THUNDER_OVERLAY="1" if side == "overlay" else "0", PYTHONPATH=os.pathsep.join(paths),
                   CUDA_VISIBLE_DEVICES="",
                   # keep .pyc files out of site-packages / --pythonpath dirs (and reuse them across runs)
                   PYTHONPYCACHEPREFIX=str(Path(tempfile.gettempdir()) / "thunder-gate-pycache"))
        # with a pycache prefix, bytecode in site-packages is not read: the prefix must be writable and written,
        # or every run compiles torch and thunder from source (about 40 s per process)
        for key in ("GATE_OUT", "GATE_SHARD", "GATE_IDS", "GATE_LIST_IDS", "PYTHONDONTWRITEBYTECODE"):
            env.pop(key, None)
        if side == "overlay":
            env.update(kv.split("=", 1) for kv in a.overlay_env)
        if out:
            env["GATE_OUT"] = str(out)
        if unit and unit.count > 1:
            env["GATE_SHARD"] = f"{unit.index}/{unit.count}"
        if ids_file:
            env["GATE_IDS"] = str(ids_file)
        if a.collect_only:
            env["GATE_LIST_IDS"] = "1"
        return env

    def selection(self, unit, side, ids):
        """Everything that decides which tests run and how; equal selections may share results. The number of
        xdist workers is not part of it: outcomes must not depend on it (and a rerun on a busier machine may
        lower -n), and a test that does is flaky, which the confirming rerun without xdist shows."""
        a = self.args
        return {"module": unit.module, "k": self.kexpr(unit), "shard": [unit.index, unit.count],
                "python": a.python, "pythonpath": a.pythonpath,
                "overlay_pythonpath": a.overlay_pythonpath if side == "overlay" else None,
                "overlay_env": a.overlay_env if side == "overlay" else [], "test_root": a.test_root,
                "timeout": a.timeout, "ids": ids_digest(ids) if ids else None, "collect_only": a.collect_only,
                **({"gloo": True} if self.gloo(unit) else {})}

    def side_key(self, side):
        """The part of every unit's key that comes from the side's environment (see key()), as strings."""
        probe = self.probes[side]
        key = {"thunder": probe.get("thunder"), "thunder_tree": probe.get("thunder_tree"), "torch": probe.get("torch"),
               "python": probe.get("python"), "plugin": PLUGIN_VERSION}
        if side == "overlay":
            overlay = probe.get("overlay") or {}
            key.update(overlay=overlay.get("version"), overlay_state=overlay.get("state"),
                       series=next(iter(self.series(side)), None),
                       patched_sources=overlay.get("patched_sources_sha256"),
                       overlay_env=" ".join(sorted(self.args.overlay_env)) or None)
        return {name: "-" if v is None else str(v) for name, v in key.items()}

    def key(self, unit, side, ids=None):
        """What decides a unit's outcomes on a side, as strings ('-': unknown), whatever machine or folder it runs
        in: thunder's version and the sha256 of its package tree, torch, Python, the plugin's version, the test
        file's sha256 (and the --test-root's conftest.py), and the selection (-k, shard, per-test timeout, gloo,
        the ids of a confirming rerun). The overlay side's adds the overlay's version and state, the series'
        fingerprint (its digest: the section of that name in overlay.outcomes lists it), the digest of the
        patched sources as they run, and --overlay-env. Where thunder comes from (--pythonpath) is not in it: the
        tree's sha256 is."""
        a = self.args
        root = a.test_root or self.probes[side].get("tests_dir")
        key = {"test_file": file_sha256(module_file(root, unit.module)) if root else None,
               "module": unit.module, "k": self.kexpr(unit), "shard": f"{unit.index}/{unit.count}",
               "timeout": a.timeout, "gloo": "yes" if self.gloo(unit) else "no"}
        if a.test_root:
            key["conftest"] = file_sha256(Path(a.test_root) / "conftest.py") or "thunder.tests.conftest"
        if ids:
            key["ids"] = ids_digest(ids)
        return {**self.side_key(side), **{name: "-" if v is None else str(v) for name, v in key.items()}}

    def series(self, side):
        """{digest: fingerprint} of the series this side runs with ({}: none, e.g. on the stock side)."""
        fingerprint = (self.probes[side].get("overlay") or {}).get("series") if side == "overlay" else None
        return {store.digest(fingerprint): fingerprint} if fingerprint else {}

    def store_file(self, side):
        return store.path(self.store_dir, side)

    def reuses_store(self, side):
        """Stock results are reused by default (they do not depend on the series), the overlay's with --resume."""
        return not self.args.rerun_stock if side == "stock" else self.args.resume

    def from_store(self, unit, side, key):
        """The unit's stored run when its key is `key` and its pytest ended normally, else None."""
        block = store.read(self.store_file(side))["blocks"].get(unit.label)
        if block is None or block["digest"] != store.digest(key) or not store.usable(block):
            return None
        run = store.run_of(block, self.store_file(side))
        probe = self.probes[side]
        # the key matched what this side imports now: the same thunder tree, torch and overlay
        jit_ext = (f"{Path(probe['thunder_file']).parent / 'core' / 'jit_ext.py'} via {block['loader']}"
                   if probe.get("thunder_file") and block["loader"] else None)
        run["meta"] = {"meta": True, "thunder": probe.get("thunder"), "thunder_file": probe.get("thunder_file"),
                       "torch": probe.get("torch"), "python": probe.get("python"), "jit_ext": jit_ext,
                       "overlay": probe.get("overlay"), "from_store": True}
        run["seconds"], run["cpu_seconds"] = self.time_of(unit, side, block, key)
        return run

    def time_of(self, unit, side, block, key):
        """(wall, CPU) seconds of a stored unit's run: from OUT/<side>.times, else from this folder's raw run of
        the same selection where that run imported what this side imports now and gave the stored outcomes (a
        run from before the times file: recorded there now); (None, None) when neither knows."""
        wall, cpu = store.time_of(self.store_dir, side, block)
        if wall is not None:
            return wall, cpu
        sel = self.selection(unit, side, None)
        out = self.raw_dir / f"{unit.file_stem}-{side}-{selection_tag(sel)}.jsonl" if self.raw_dir else None
        if out is None or not out.exists():
            return None, None
        run = read_run(unit.module, out)
        if not self.reusable(run, sel, side) or store.block_of(unit, key, dict(run, returncode=run["trailer"][
                "returncode"]))["results"] != block["results"]:
            return None, None
        wall, cpu = run["trailer"].get("seconds"), run["trailer"].get("cpu_seconds")
        if wall is not None:
            store.put_time(self.store_dir, side, unit.label, block["digest"], wall, cpu)
        return wall, cpu

    def gloo(self, unit):
        return getattr(self.args, "gloo", False) and unit.module.startswith("distributed.")

    @staticmethod
    def kexpr(unit):
        return "not cuda" + (f" and ({unit.kexpr})" if unit.kexpr else "")

    def reusable(self, run, sel, side):
        """A run may stand in for a new one when it made the same selection, pytest finished by itself with an
        ordinary exit status, and it imported the same thunder, torch and overlay patches as this side does now."""
        trailer, meta, now = run["trailer"], run["meta"], self.probes[side]
        if run["header"].get("sel") != sel or not trailer or run["finished"] is None:
            return False
        if not ordinary_exit(trailer["returncode"], run["collect_errors"]):
            return False
        if meta.get("thunder") is None:  # the run never imported thunder: its outcomes do not depend on it
            return True
        return all(meta.get(k) == now.get(k) for k in ("thunder", "thunder_file", "torch", "overlay"))

    def command(self, unit, side, ids):
        a = self.args
        if a.test_root:
            target = [str(module_file(a.test_root, unit.module))]
            if not (Path(a.test_root) / "conftest.py").exists():  # thunder's conftest (fixtures, options, order)
                target += ["-p", "thunder.tests.conftest"]
        else:
            target = ["--pyargs", f"thunder.tests.{unit.module}"]
        # -k also matches the names of the folders between rootdir and the file: root them at the tests folder,
        # so that a folder named like a test word (a venv "cuda-env", a pytest tmp "test_regress0") selects nothing
        root = a.test_root or self.probes[side].get("tests_dir")
        target += ["--rootdir", root] if root else []
        if self.gloo(unit):  # CPU variants of thunder's CUDA-only distributed tests (gatelib/gloo.py)
            target += ["-p", "gatelib.gloo"]
        cmd = [a.python, "-m", "pytest", *target, "-p", "gatelib.plugin", "-p", "no:cacheprovider", "-q",
               "--no-header", "-rN", "-o", f"timeout={a.timeout}", "-o", "timeout_method=signal",
               "--continue-on-collection-errors", "-k", self.kexpr(unit)]
        if a.collect_only:
            return cmd + ["--collect-only"]
        n = self.workers.get(unit.module, a.n)
        if n > 0 and not ids:
            cmd += ["-n", str(n)]
        return cmd

    def run(self, unit, side, ids=None):
        """Runs (or reuses) `unit` on `side`; with `ids` only those tests, without xdist (the confirming rerun).
        Returns read_run()'s dict plus seconds, returncode, reused, the jsonl path and the log (None for a run
        from the store). A unit's run (not a confirming rerun, not --collect-only) goes to the store as it ends."""
        stored = not ids and not self.args.collect_only
        if stored:
            key = self.key(unit, side)
            if self.reuses_store(side) and (run := self.from_store(unit, side, key)):
                return run
        sel = self.selection(unit, side, ids)
        out = self.raw_dir / f"{unit.file_stem}-{side}{'-confirm' if ids else ''}-{selection_tag(sel)}.jsonl"
        if self.args.resume and not stored and out.exists():
            run = read_run(unit.module, out)
            if self.reusable(run, sel, side):
                return dict(run, seconds=run["trailer"].get("seconds", 0), returncode=run["trailer"]["returncode"],
                            reused=run["header"].get("date"), path=out, log=out.with_suffix(".log"))
        ids_file, cmd = None, self.command(unit, side, ids)
        if ids:
            ids_file = out.with_suffix(".ids")
            ids_file.write_text("\n".join(parts_of(ids)) + "\n")
        out.write_text(json.dumps({"sel": sel, "date": datetime.datetime.now().isoformat(timespec="seconds"),
                                   "command": cmd}) + "\n")
        t0 = time.time()
        self.current = {"unit": unit, "side": side, "path": out, "t0": t0, "rerun": bool(ids)}
        try:
            with open(out.with_suffix(".log"), "w") as log, tempfile.TemporaryDirectory() as cwd:
                rc, cpu = call_timed(cmd, env=self.env(side, out, unit, ids_file), cwd=cwd, stdout=log,
                                     stderr=subprocess.STDOUT)
        finally:
            self.current = None
        secs = round(time.time() - t0, 1)
        with open(out, "a") as f:  # the trailer: this run ended (pytest's own end is the plugin's 'finished')
            f.write(json.dumps({"complete": True, "returncode": rc, "seconds": secs, "cpu_seconds": cpu}) + "\n")
        result = dict(read_run(unit.module, out), seconds=secs, cpu_seconds=cpu, returncode=rc, reused=None,
                      path=out, log=out.with_suffix(".log"))
        if stored:
            store.put(self.store_file(side), store.block_of(unit, key, result), self.series(side))
            store.put_time(self.store_dir, side, unit.label, store.digest(key), secs, cpu)
        return result


def call_timed(cmd, **popen_args):
    """subprocess.call that also returns the CPU seconds (user + system) of the process and of every process it
    waited for (pytest's xdist workers)."""
    with subprocess.Popen(cmd, **popen_args) as proc:
        try:
            _, status, usage = os.wait4(proc.pid, 0)
        except BaseException:
            proc.kill()
            raise
        proc.returncode = os.waitstatus_to_exitcode(status)
    return proc.returncode, round(usage.ru_utime + usage.ru_stime, 1)


def infra_problem(run):
    """Why a run's results cannot be trusted, or None: pytest crashed, was killed or failed as a program."""
    rc = run["returncode"]
    see = f", see {run['log']}" if run.get("log") else f" (from {run['path']})"
    if run["finished"] is None:
        return f"pytest did not finish (exit {rc}){see}"
    if not ordinary_exit(rc, run["collect_errors"]):
        return f"pytest exit {rc}{see}"
    return None

