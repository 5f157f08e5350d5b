"""A fault of the overlay's own engine never breaks `import thunder`: stock thunder loads with one warning
naming the fault, and only THUNDER_OVERLAY=strict turns it into an ImportError. Real thunder, fresh
processes; the faults are real broken copies of the engine or engine functions that raise."""

import shutil
from pathlib import Path

import pytest

from conftest import IMPORT_AND_REPORT, JIT_STILL_WORKS, REPO, assert_strict_raises, last_json, refused, run_python

# Faults raised inside the engine once it is imported: building the plan, and building the module's spec.
FAULTS = {
    "plan": "import thunder_overlay.engine as e\ndef plan(*a, **k): raise ZeroDivisionError('plan broke')\ne.plan = plan",
    "loader": (
        "import thunder_overlay.engine as e\n"
        "class PatchedSourceLoader:\n"
        "    def __init__(self, *a): raise LookupError('loader broke')\n"
        "e.PatchedSourceLoader = PatchedSourceLoader"
    ),
}


@pytest.fixture(scope="module")
def broken_engine_package(tmp_path_factory) -> Path:
    """A copy of the overlay package whose engine module does not even compile, to put on PYTHONPATH."""
    root = tmp_path_factory.mktemp("broken-overlay")
    package = root / "thunder_overlay"
    shutil.copytree(REPO / "overlay" / "thunder_overlay", package, ignore=shutil.ignore_patterns("__pycache__"))
    with open(package / "engine.py", "a") as f:
        f.write("\ndef broken(:\n")
    return root


ENGINE_FAILED = "the overlay's engine failed: "


def stock_with_one_warning(proc, fault: str) -> dict:
    out = refused(proc)  # one warning naming the reason, stock thunder, state refused, jit works
    assert out["status"]["reason"].startswith(ENGINE_FAILED) and fault in out["status"]["reason"]
    return out


def test_an_engine_that_cannot_be_imported_leaves_stock_thunder(broken_engine_package):
    env = {"PYTHONPATH": str(broken_engine_package)}
    out = stock_with_one_warning(run_python(IMPORT_AND_REPORT, JIT_STILL_WORKS, env=env), "SyntaxError")
    assert out["overlay"].startswith(str(broken_engine_package)), "the broken copy was the one imported"
    assert_strict_raises(env, ENGINE_FAILED + "SyntaxError")


@pytest.mark.parametrize("where", [pytest.param(w, marks=pytest.mark.slow) if w == "loader" else w for w in sorted(FAULTS)])
def test_an_engine_that_raises_leaves_stock_thunder(where):
    fault = {"plan": "ZeroDivisionError: plan broke", "loader": "LookupError: loader broke"}[where]
    stock_with_one_warning(run_python(FAULTS[where], IMPORT_AND_REPORT, JIT_STILL_WORKS), fault)
    assert_strict_raises({}, ENGINE_FAILED + fault, FAULTS[where])


def test_the_engine_without_faults_patches():
    # the same harness, no fault: the warning count above is the engine's, not the harness's
    out = last_json(run_python(IMPORT_AND_REPORT, JIT_STILL_WORKS))
    assert out["patched"] and out["messages"] == [] and out["status"]["state"] == "patched"
