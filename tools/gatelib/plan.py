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


def file_sha256(path):
    """sha256 of a file's bytes, None for a missing file."""
    path = Path(path)
    return hashlib.sha256(path.read_bytes()).hexdigest() if path.is_file() else None


def tree_sha256(root):
    """sha256 of a package tree: every file under `root` (bytecode aside) by its sorted relative path and bytes."""
    root = Path(root)
    files = sorted((p.relative_to(root).as_posix(), p) for p in root.rglob("*")
                   if p.is_file() and "__pycache__" not in p.parts and p.suffix not in (".pyc", ".pyo"))
    digest = hashlib.sha256()
    for rel, p in files:
        digest.update(rel.encode() + b"\0" + hashlib.sha256(p.read_bytes()).digest())
    return digest.hexdigest()


def series_fingerprint(series_dir, patch_names=None, base=None):
    """What a series changes: {"base", "files": {thunder file: {patch file: sha256 of the patch file}}} for each
    patch of `series_dir` (those in `patch_names`, where given: the ones the overlay applied), each file of thunder
    it changes but the tests, as the overlay applies them (thunder_overlay.patchset)."""
    from thunder_overlay import patchset

    files = {}
    for patch in patchset.read_series(Path(series_dir)):
        name = Path(patch.name).name
        if patch_names is not None and name not in patch_names:
            continue
        sha = hashlib.sha256(Path(patch.name).read_bytes()).hexdigest()
        for path in patch.patched_paths():
            files.setdefault(path, {})[name] = sha
    return {"base": base if base is not None else Path(series_dir).name, "files": files}


def overlay_fingerprint():
    """In a process where the overlay is loaded: its state and version, the patches applied, the series'
    fingerprint (series_fingerprint) and a digest of the source of every module the series patches as it really
    runs (the patched text), so results of other patches are never reused as this overlay's."""
    import importlib

    import thunder_overlay

    st = thunder_overlay.status()
    digest = hashlib.sha256()
    for file in st.get("files") or []:
        module = importlib.import_module(file["module"])
        digest.update(module.__loader__.get_source(file["module"]).encode())
    series = None
    if st.get("series_dir") and st.get("patches"):
        series = series_fingerprint(st["series_dir"], st["patches"], st.get("base"))
    return {"state": st.get("state"), "version": st.get("overlay_version"), "patches": st.get("patches"),
            "series": series, "patched_sources_sha256": digest.hexdigest()[:16]}


def probe_here():
    """Run in a side's environment by the driver: the thunder (and the sha256 of its package tree), torch,
    Python and overlay that side's tests will see."""
    import platform
    import sys

    import thunder
    import thunder.tests
    import torch

    overlay = overlay_fingerprint() if any(m.split(".")[0] == "thunder_overlay" for m in sys.modules) else None
    return {"thunder": str(getattr(thunder, "__version__", "?")), "thunder_file": thunder.__file__,
            "thunder_tree": tree_sha256(Path(thunder.__file__).parent), "torch": str(torch.__version__),
            "python": platform.python_version(), "tests_dir": str(Path(thunder.tests.__file__).parent),
            "overlay": overlay}
