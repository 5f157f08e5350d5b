"""Shared helpers: every overlay-on/off comparison runs real thunder in a fresh subprocess."""

from __future__ import annotations

import atexit
import json
import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PATCHES = REPO / "patches"
TOOLS = REPO / "tools"
# The filename of patched code (tracebacks, linecache); the module's __file__ stays the file on disk.
PATCHED_SUFFIX = " (patched by thunder-overlay)"

# The tests' own bytecode cache: the user's ~/.cache is neither read nor written by the suite. Set before
# any test module imports thunder in this process; subprocesses inherit it unless a test sets another.
SESSION_CACHE = tempfile.mkdtemp(prefix="thunder-overlay-tests-cache-")
atexit.register(shutil.rmtree, SESSION_CACHE, True)
os.environ["THUNDER_OVERLAY_CACHE_DIR"] = SESSION_CACHE


def run_python(
    *code: str, overlay: str = "1", env: dict | None = None, args=(), timeout: int = 600, inherit_pythonpath=True,
    unset=(), **popen,
):
    """Run the code parts, one after the other, in a fresh interpreter of this environment (start-up hook
    included). A PYTHONPATH in ``env`` goes before the one the version matrix set, unless told not to;
    ``unset`` names variables to remove from the environment."""
    full_env = dict(os.environ, THUNDER_OVERLAY=overlay, PYTHONWARNINGS="default")
    for name in ("THUNDER_OVERLAY_PATCHES", "THUNDER_OVERLAY_BASE", *unset):
        full_env.pop(name, None)
    env = dict(env or {})
    if "PYTHONPATH" in env and os.environ.get("PYTHONPATH") and inherit_pythonpath:  # keep the matrix's release
        env["PYTHONPATH"] += os.pathsep + os.environ["PYTHONPATH"]
    full_env.update(env)
    return subprocess.run(
        [sys.executable, *args, "-c", "\n".join(textwrap.dedent(part) for part in code)],
        env=full_env, capture_output=True, text=True, timeout=timeout, **popen,
    )


def overlay_active() -> bool:
    from thunder_overlay import config, status

    return status()["state"] in (*config.PATCHED_STATES, *config.READY_STATES)


# Tests of what the patches do; they need the series applied in this process (a known base, or the
# series THUNDER_OVERLAY_BASE names)
requires_overlay = pytest.mark.skipif(not overlay_active(), reason="the overlay's series is not active in this process")


# A small jit that must work whenever the overlay refuses: stock thunder keeps running.
JIT_STILL_WORKS = """
import torch, thunder
out = thunder.jit(lambda a, b: a * b + 1)(torch.ones(2), torch.full((2,), 2.0))
assert out.tolist() == [3.0, 3.0], out
print("jit works")
"""


def installed_site() -> Path:
    """The directory holding the thunder these tests run against (site-packages, or the version matrix's
    --target directory)."""
    import importlib.util

    return Path(importlib.util.find_spec("thunder").origin).parents[1]


def installed_file(path: str = "thunder/core/jit_ext.py") -> Path:
    return installed_site() / path


def installed_dist_infos() -> list[Path]:
    """The dist-info folders beside the thunder under test: one for an install, none for a source tree (like
    upstream main from git on PYTHONPATH, which the version matrix tests)."""
    return list(installed_site().glob("lightning_thunder-*.dist-info"))


def installed_dist_info() -> Path:
    """The dist-info of the thunder under test; skips the test where it has none."""
    found = installed_dist_infos()
    if not found:
        pytest.skip(f"the thunder under test ({installed_site()}) has no distribution metadata")
    (dist,) = found
    return dist


def installed_form() -> str:
    """How ``status`` describes the install of the thunder under test: ``wheel (...)``, or ``source tree ...``
    where it has no dist-info (upstream main from git on PYTHONPATH)."""
    return "wheel (" if installed_dist_infos() else "source tree ("


def installed_base(patches_dir: Path | None = None):
    """The manifest's base of the thunder under test, found as the engine finds it: by the files' bytes."""
    from thunder_overlay import manifest

    bases = manifest.load(patches_dir)
    return manifest.base_for_files(bases, manifest.hashes_under(installed_site(), manifest.target_paths(bases)))


def copy_thunder(target: Path, *, dist_info: bool = True) -> Path:
    """A copy of the installed thunder package (without its tests; its bytecode kept, still valid since
    copytree keeps modification times) and, unless told not to or it has none, its dist-info, in ``target``."""
    shutil.copytree(installed_site() / "thunder", target / "thunder", ignore=shutil.ignore_patterns("tests"))
    for dist in installed_dist_infos() if dist_info else ():
        shutil.copytree(dist, target / dist.name)
    return target


@pytest.fixture(scope="session")
def thunder_copy(tmp_path_factory) -> Path:
    """A copy of the installed thunder (package and dist-info) in a --target style directory."""
    return copy_thunder(tmp_path_factory.mktemp("thunder-copy"))


def last_json(proc) -> dict:
    """The JSON object a subprocess printed last (after asserting it succeeded)."""
    assert proc.returncode == 0, proc.stderr[-3000:]
    import json

    return json.loads([line for line in proc.stdout.splitlines() if line.startswith(("{", "["))][-1])


# Whether module ``m`` runs the overlay's patched code (for the code run in a subprocess).
RUNS_PATCHED = "(type(m.__loader__).__name__ == 'PatchedSourceLoader')"

# Import thunder in a subprocess and print whether jit_ext runs patched and the overlay's status.
IMPORT_AND_STATUS = f"""
import json, thunder, thunder.core.jit_ext as m, thunder_overlay
print(json.dumps({{"file": m.__file__, "patched": {RUNS_PATCHED}, "status": thunder_overlay.status()}}))
"""


@pytest.fixture
def patches_copy(tmp_path) -> Path:
    """A copy of the patches directory, for the explicit THUNDER_OVERLAY_PATCHES override."""
    shutil.copytree(PATCHES, tmp_path / "patches")
    return tmp_path / "patches"


# A refusal, as a user meets it: import thunder, report the overlay's warnings and status, jit still works.
IMPORT_AND_REPORT = f"""
import json, warnings
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    import thunder, thunder.core.jit_ext as m
import thunder_overlay
messages = [str(w.message) for w in caught if str(w.message).startswith("thunder-overlay:")]
print(json.dumps({{"messages": messages, "patched": {RUNS_PATCHED},
                  "overlay": thunder_overlay.__file__, "status": thunder_overlay.status()}}))
"""

# What a refusal must never do: turn into an exception out of `import thunder` when warnings are errors.
# thunder itself warns at import that transformer_engine is missing, so that one warning stays allowed,
# as a project's pytest configuration would (stock thunder fails `-W error` alone).
WARNINGS_AS_ERRORS = ("-W", "error", "-W", "ignore:transformer_engine module not found:UserWarning")


def refused(proc) -> dict:
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "jit works" in proc.stdout
    out = json.loads([line for line in proc.stdout.splitlines() if line.startswith("{")][-1])
    assert len(out["messages"]) == 1, out["messages"]
    assert not out["patched"], "a refusal leaves the stock module"
    assert out["status"]["state"] == "refused" and out["status"]["patches"] == []
    assert not any(f["patched"] for f in out["status"]["files"]), "no file of thunder runs patched"
    assert out["messages"][0] == "thunder-overlay: not patching thunder, stock thunder runs. " + out["status"]["reason"]
    return out


def run_refusal(env: dict, overlay: str = "1"):
    return run_python(IMPORT_AND_REPORT, JIT_STILL_WORKS, env=env, overlay=overlay)


def assert_strict_raises(env: dict, reason: str, *before: str):
    """Under strict, importing thunder (after the code ``before``) fails with the overlay's ImportError."""
    proc = run_python(*before, "import thunder", env=env, overlay="strict")
    assert proc.returncode != 0
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith(
        "ImportError: thunder-overlay: importing thunder fails because THUNDER_OVERLAY=strict and "
        "the overlay cannot patch thunder: "
    ), last
    assert reason in last and "stock thunder runs" not in last
