"""Activation by installation: the start-up hook, the finder and what the patched module looks like."""

from conftest import JIT_STILL_WORKS, PATCHED_SUFFIX, installed_form, last_json, run_python

STATUS = "import json, thunder_overlay; print(json.dumps(thunder_overlay.status()))"


def test_jit_ext_is_patched_on_import_and_file_on_disk_untouched():
    proc = run_python(
        """
        import hashlib, inspect, json, linecache
        import thunder, thunder.core.jit_ext as je, thunder_overlay
        on_disk = open(je.__spec__.origin, encoding="utf-8").read()
        print(json.dumps({
            "status": thunder_overlay.status(),
            "file": je.__spec__.origin,
            "code_file": thunder.thunder_general_jit.__code__.co_filename,
            "source_differs": inspect.getsource(je) != on_disk,
            "linecache_is_source": "".join(linecache.getlines(je.__file__)) == inspect.getsource(je),
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
    assert out["code_file"] == out["dunder_file"] == out["file"] + PATCHED_SUFFIX
    assert out["source_differs"] and out["linecache_is_source"]
    assert out["disk_sha"] == status["base_sha256"], "the file on disk is never modified"


def test_traceback_shows_patched_lines():
    proc = run_python(
        """
        import inspect, traceback, thunder.core.jit_ext as je
        patched = inspect.getsource(je).splitlines()
        stock = open(je.__spec__.origin, encoding="utf-8").read().splitlines()
        line = next(i for i, (p, s) in enumerate(zip(patched, stock), start=1) if p != s and p.strip())
        print(repr(patched[line - 1].strip()))
        print("".join(traceback.StackSummary.from_list([(je.__file__, line, "f", None)]).format()))
        """
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    expected, formatted = proc.stdout.split("\n", 1)
    assert PATCHED_SUFFIX in formatted and eval(expected) and eval(expected) in formatted


def test_switched_off_gives_stock_module():
    proc = run_python(
        """
        import json, sys, thunder.core.jit_ext as je, thunder_overlay
        print(json.dumps({"file": je.__file__, "finders": [type(f).__name__ for f in sys.meta_path],
                          "status": thunder_overlay.status()}))
        """,
        overlay="0",
    )
    out = last_json(proc)
    assert out["file"] == out["file"].removesuffix(PATCHED_SUFFIX) and "JitExtFinder" not in out["finders"]
    assert out["status"]["state"] == "disabled"


def test_start_up_hook_imports_neither_thunder_nor_torch_and_runs_once():
    proc = run_python(
        """
        import json, site, sys
        for p in list(sys.path):
            if p.endswith("site-packages"):
                site.addsitedir(p)  # processes the .pth a second time
        print(json.dumps({"heavy": sorted(m for m in ("torch", "thunder", "thunder_overlay.engine") if m in sys.modules),
                          "finders": [type(f).__name__ for f in sys.meta_path].count("JitExtFinder")}))
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


def test_cli_diff_prints_the_active_series():
    proc = run_python("import sys; from thunder_overlay.cli import main; sys.exit(main(['diff']))")
    assert proc.returncode == 0
    assert proc.stdout.count("--- a/thunder/core/jit_ext.py") >= 1 and "Bug: " in proc.stdout


def test_second_enable_warns_and_changes_nothing():
    proc = run_python(
        """
        import warnings, sys, thunder_overlay
        with warnings.catch_warnings(record=True) as w:
            warnings.simplefilter("always")
            thunder_overlay.enable()
        assert len(w) == 1 and "already enabled" in str(w[0].message), [str(x.message) for x in w]
        assert [type(f).__name__ for f in sys.meta_path].count("JitExtFinder") == 1
        """,
        JIT_STILL_WORKS,
    )
    assert proc.returncode == 0 and "jit works" in proc.stdout, proc.stderr
