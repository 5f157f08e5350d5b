"""A fault of the overlay's own engine never breaks `import thunder`: stock thunder loads with one warning
naming the fault, and only THUNDER_OVERLAY=strict turns it into an ImportError. Real thunder, fresh
processes; the faults are real broken copies of the engine or engine functions that raise."""

import json
import shutil
from pathlib import Path

import pytest

from conftest import JIT_STILL_WORKS, REPO, run_python

IMPORT_AND_REPORT = """
import json, warnings
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    import thunder, thunder.core.jit_ext as je
import thunder_overlay
messages = [str(w.message) for w in caught if str(w.message).startswith("thunder-overlay:")]
print(json.dumps({"messages": messages, "patched": je.__file__.endswith("(patched by thunder-overlay)"),
                  "overlay": thunder_overlay.__file__, "status": thunder_overlay.status()}))
"""

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


def stock_with_one_warning(proc, fault: str) -> dict:
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "jit works" in proc.stdout
    out = json.loads(next(line for line in proc.stdout.splitlines() if line.startswith("{")))
    assert not out["patched"], "stock jit_ext runs"
    assert len(out["messages"]) == 1, out["messages"]
    message = out["messages"][0]
    assert message.startswith("thunder-overlay: not patching thunder.core.jit_ext, stock thunder runs. "
                              "the overlay's engine failed: "), message
    assert fault in message
    assert out["status"]["state"] == "refused" and fault in out["status"]["reason"]
    assert out["status"]["patches"] == []
    return out


def strict_fails_with(proc, fault: str) -> None:
    assert proc.returncode != 0
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("ImportError: thunder-overlay: importing thunder.core.jit_ext fails because "
                           "THUNDER_OVERLAY=strict and the overlay cannot patch it: the overlay's engine failed: "), last
    assert fault in last


def test_an_engine_that_cannot_be_imported_leaves_stock_thunder(broken_engine_package):
    env = {"PYTHONPATH": str(broken_engine_package)}
    out = stock_with_one_warning(run_python(IMPORT_AND_REPORT, JIT_STILL_WORKS, env=env), "SyntaxError")
    assert out["overlay"].startswith(str(broken_engine_package)), "the broken copy was the one imported"
    strict_fails_with(run_python("import thunder", env=env, overlay="strict"), "SyntaxError")


@pytest.mark.parametrize("where", sorted(FAULTS))
def test_an_engine_that_raises_leaves_stock_thunder(where):
    fault = {"plan": "ZeroDivisionError: plan broke", "loader": "LookupError: loader broke"}[where]
    stock_with_one_warning(run_python(FAULTS[where], IMPORT_AND_REPORT, JIT_STILL_WORKS), fault)
    strict_fails_with(run_python(FAULTS[where], "import thunder", overlay="strict"), fault)


def test_the_engine_without_faults_patches():
    # the same harness, no fault: the warning count above is the engine's, not the harness's
    proc = run_python(IMPORT_AND_REPORT, JIT_STILL_WORKS)
    out = json.loads(next(line for line in proc.stdout.splitlines() if line.startswith("{")))
    assert out["patched"] and out["messages"] == [] and out["status"]["state"] == "patched"
