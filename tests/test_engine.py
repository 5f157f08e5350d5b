"""Activation by installation: the start-up hook, the finder and what the patched module looks like."""

import pytest

from conftest import JIT_STILL_WORKS, PATCHED_SUFFIX, installed_base, installed_form, last_json, run_python

STATUS = "import json, thunder_overlay; print(json.dumps(thunder_overlay.status()))"


def test_jit_ext_is_patched_on_import_and_file_on_disk_untouched():
    proc = run_python(
        """
        import hashlib, inspect, json, linecache
        import thunder, thunder.core.jit_ext as je, thunder_overlay
        on_disk = open(je.__spec__.origin, encoding="utf-8").read()
        patched = je.__loader__.get_source(je.__name__)
        code_file = thunder.thunder_general_jit.__code__.co_filename
        print(json.dumps({
            "status": thunder_overlay.status(),
            "file": je.__spec__.origin,
            "code_file": code_file,
            "source_differs": patched != on_disk,
            "linecache_is_source": "".join(linecache.getlines(code_file)) == patched,
            "function_source": inspect.getsource(je.thunder_general_jit) in patched,
            "dunder_file": je.__file__,
            "loader": type(je.__loader__).__name__,
            "disk_sha": hashlib.sha256(on_disk.encode()).hexdigest(),
        }))
        """
    )
    out = last_json(proc)
    status = out["status"]
    assert status["state"] == "patched" and status["known"] and status["series_dir"].endswith("/" + status["base"])
    assert status["patches"] and status["reason"] is None and status["install"].startswith(installed_form())
    assert out["file"].endswith("thunder/core/jit_ext.py") and out["loader"] == "PatchedSourceLoader"
    assert out["dunder_file"] == out["file"], "__file__ stays the file on disk: thunder opens and locates files by it"
    assert out["code_file"] == out["file"] + PATCHED_SUFFIX
    assert out["source_differs"] and out["linecache_is_source"] and out["function_source"]
    (jit_ext,) = [f for f in status["files"] if f["module"] == "thunder.core.jit_ext"]
    assert jit_ext == {"module": "thunder.core.jit_ext", "path": out["file"], "sha256": out["disk_sha"],
                       "base_sha256": out["disk_sha"], "matches_base": True, "imported": True, "patched": True}
    assert all(f["matches_base"] for f in status["files"]), "the files on disk are never modified"
    assert all(f["patched"] == f["imported"] for f in status["files"]), "every file the series changes runs patched"


@pytest.mark.slow
def test_traceback_shows_patched_lines():
    proc = run_python(
        """
        import traceback, thunder.core.jit_ext as je
        patched = je.__loader__.get_source(je.__name__).splitlines()
        stock = open(je.__file__, encoding="utf-8").read().splitlines()
        line = next(i for i, (p, s) in enumerate(zip(patched, stock), start=1) if p != s and p.strip())
        print(repr(patched[line - 1].strip()))
        code_file = je.thunder_general_jit.__code__.co_filename
        print("".join(traceback.StackSummary.from_list([(code_file, line, "f", None)]).format()))
        """
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    expected, formatted = proc.stdout.split("\n", 1)
    assert PATCHED_SUFFIX in formatted and eval(expected) and eval(expected) in formatted


@pytest.mark.slow
def test_switched_off_gives_stock_module():
    proc = run_python(
        """
        import json, sys, thunder.core.jit_ext as je, thunder_overlay
        print(json.dumps({"loader": type(je.__loader__).__name__, "finders": [type(f).__name__ for f in sys.meta_path],
                          "status": thunder_overlay.status()}))
        """,
        overlay="0",
    )
    out = last_json(proc)
    assert out["loader"] == "SourceFileLoader" and "ThunderFinder" not in out["finders"]
    assert out["status"]["state"] == "disabled"


def test_start_up_hook_imports_neither_thunder_nor_torch_and_runs_once():
    proc = run_python(
        """
        import json, site, sys
        for p in list(sys.path):
            if p.endswith("site-packages"):
                site.addsitedir(p)  # processes the .pth a second time
        print(json.dumps({"heavy": sorted(m for m in ("torch", "thunder", "thunder_overlay.engine") if m in sys.modules),
                          "finders": [type(f).__name__ for f in sys.meta_path].count("ThunderFinder")}))
        """
    )
    out = last_json(proc)
    assert out == {"heavy": [], "finders": 1}


def test_status_without_import_is_a_dry_run_that_imports_nothing_heavy():
    proc = run_python(
        "import json, sys, thunder_overlay; print(json.dumps(thunder_overlay.status(import_thunder=False)))",
        "assert 'torch' not in sys.modules and 'thunder' not in sys.modules",
    )
    assert last_json(proc)["state"] == "ready"


@pytest.mark.slow
def test_status_imports_thunder_and_reports_what_the_cli_prints():
    # status() before thunder was imported imports it: the state is what thunder runs with.
    proc = run_python(STATUS, "import sys; assert 'thunder.core.jit_ext' in sys.modules")
    report = last_json(proc)
    cli = run_python("import sys; from thunder_overlay.cli import main; sys.exit(main(['status', '--json']))")
    printed = last_json(cli)
    assert report["state"] == "patched" and printed.keys() == report.keys()
    # Both processes patched alike; only the cache note may differ (the first one may have written it).
    assert {k: v for k, v in printed.items() if k != "bytecode_cache"} == {
        k: v for k, v in report.items() if k != "bytecode_cache"
    }


def test_cli_status_reports_patched_and_disabled():
    code = "import sys; from thunder_overlay.cli import main; sys.exit(main(['status']))"
    on = run_python(code)
    assert on.returncode == 0 and on.stdout.startswith("thunder-overlay: patched\n"), on.stdout + on.stderr
    assert "transformer_engine" not in on.stderr, "the CLI filters thunder's import warning"
    off = run_python(code, overlay="0")
    assert off.returncode == 0 and off.stdout.startswith("thunder-overlay: disabled")


def test_cli_diff_prints_the_hunks_the_overlay_applies():
    proc = run_python("import sys; from thunder_overlay.cli import main; sys.exit(main(['diff']))")
    assert proc.returncode == 0
    patches = installed_base().directory
    assert proc.stdout.count("\nSubject: [PATCH") == len([p for p in patches.glob("*.patch")])
    assert proc.stdout.count("--- a/thunder/core/jit_ext.py") >= 1 and "(#283)" in proc.stdout  # the messages too
    assert "--- a/thunder/tests/" not in proc.stdout, "the test modules are git am's, not the overlay's"


@pytest.mark.slow
def test_enable_is_silent_in_a_normal_install_and_warns_when_really_called_twice():
    proc = run_python(
        """
        import warnings, sys, thunder_overlay
        from thunder_overlay.config import OverlayWarning
        with warnings.catch_warnings(record=True) as w:
            warnings.simplefilter("always")
            thunder_overlay.enable()  # the start-up hook installed the finder: the user called it once
        assert w == [], [str(x.message) for x in w]
        with warnings.catch_warnings(record=True) as w:
            warnings.simplefilter("always")
            thunder_overlay.enable()
        assert len(w) == 1 and "enable() was called again" in str(w[0].message), [str(x.message) for x in w]
        assert w[0].category is OverlayWarning
        assert [type(f).__name__ for f in sys.meta_path].count("ThunderFinder") == 1
        """,
        JIT_STILL_WORKS,
    )
    assert proc.returncode == 0 and "jit works" in proc.stdout, proc.stderr


def test_a_second_enable_never_raises_under_warnings_as_errors():
    proc = run_python("import thunder_overlay; thunder_overlay.enable(); thunder_overlay.enable(); print('ok')",
                      args=("-W", "error"))
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", proc.stderr
    assert "enable() was called again" in proc.stderr


def test_inspect_finds_the_module_of_patched_code_without_scanning_every_module():
    # thunder asks inspect for source positions while tracing; a patched file's name is on no disk, so inspect
    # would scan every module of sys.modules for it at each call
    code = """
        import inspect, json, thunder
        from thunder.core import jit_ext
        code = jit_ext.thunder_general_jit.__code__  # a code object has no __module__ to go by
        scanned = []
        ismodule = inspect.ismodule
        inspect.ismodule = lambda o: scanned.append(o) or ismodule(o)
        print(json.dumps({"file": inspect.getsourcefile(code), "code_file": code.co_filename,
                          "module": getattr(inspect.getmodule(code, code.co_filename), "__name__", None),
                          "scanned": len(scanned)}))
    """
    out = last_json(run_python(code))
    assert out["code_file"].endswith(PATCHED_SUFFIX) and out["file"] == out["code_file"]
    assert out["module"] == "thunder.core.jit_ext" and out["scanned"] < 10
