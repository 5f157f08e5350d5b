"""What a gate run covers: the test modules thunder ships, their shards, and the key of each run."""

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path

SUBPACKAGES = ["", "distributed"]  # thunder.tests and thunder.tests.distributed
DEFAULT_SHARDS = {"test_ops": 4}  # about 2,800 tests, 15 minutes per side with -n 2: saved in four parts


def discover(tests_dir):
    """Module names of the test files under thunder/tests (or a --test-root): 'test_core', 'distributed.test_ddp'."""
    found = []
    for sub in SUBPACKAGES:
        folder = Path(tests_dir) / sub
        found += [f"{sub}.{p.stem}" if sub else p.stem for p in sorted(folder.glob("test_*.py"))]
    return found


def module_file(root, module):
    return Path(root) / (module.replace(".", "/") + ".py")


@dataclass(frozen=True)
class Unit:
    """One pytest run's worth of a module on one side: the whole module, or shard `index` of `count`."""
    module: str
    kexpr: str | None = None  # extra -k expression (ANDed with 'not cuda')
    index: int = 1
    count: int = 1

    @property
    def label(self):
        return self.module + (f" #{self.index}/{self.count}" if self.count > 1 else "")

    @property
    def file_stem(self):
        return self.module + (f".{self.index}of{self.count}" if self.count > 1 else "")


def units(plan, shards):
    """[(module, kexpr)] -> {module: [Unit, ...]} with each module split into its shard count."""
    return {m: [Unit(m, k, i, shards.get(m, 1)) for i in range(1, shards.get(m, 1) + 1)] for m, k in plan}


def selection_tag(sel):
    """A short stable key of everything that decides a run's outcomes (see runner.selection)."""
    return hashlib.sha1(json.dumps(sel, sort_keys=True).encode()).hexdigest()[:10]


def overlay_fingerprint():
    """In a process where the overlay is loaded: its state, the patches applied and a digest of the source of every
    module the series patches as it really runs (the patched text), so results of other patches are never reused as
    this overlay's."""
    import importlib

    import thunder_overlay

    st = thunder_overlay.status()
    digest = hashlib.sha256()
    for file in st.get("files") or []:
        module = importlib.import_module(file["module"])
        digest.update(module.__loader__.get_source(file["module"]).encode())
    return {"state": st.get("state"), "patches": st.get("patches"), "patched_sources_sha256": digest.hexdigest()[:16]}


def probe_here():
    """Run in a side's environment by the driver: the thunder, torch and overlay that side's tests will see."""
    import sys

    import thunder
    import thunder.tests
    import torch

    overlay = overlay_fingerprint() if any(m.split(".")[0] == "thunder_overlay" for m in sys.modules) else None
    return {"thunder": str(getattr(thunder, "__version__", "?")), "thunder_file": thunder.__file__,
            "torch": str(torch.__version__), "tests_dir": str(Path(thunder.tests.__file__).parent), "overlay": overlay}
