"""Activation by installation: the start-up hook, the finder and what the patched module looks like."""

import json

from conftest import JIT_STILL_WORKS, run_python

STATUS = "import json, thunder_overlay; print(json.dumps(thunder_overlay.status()))"


def last_json(proc) -> dict:
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_jit_ext_is_patched_on_import_and_file_on_disk_untouched():
    proc = run_python(
        """
        import hashlib, inspect, json, linecache
        import thunder, thunder.core.jit_ext as je, thunder_overlay
        code_file = je.ProxyRenames.record.__code__.co_filename
        print(json.dumps({
            "status": thunder_overlay.status(),
            "file": je.__spec__.origin,
            "code_file": code_file,
            "source_has_patch": "class ProxyRenames" in inspect.getsource(je),
            "linecache": "ProxyRenames" in "".join(linecache.getlines(code_file)),
            "dunder_file": je.__file__,
            "disk_sha": hashlib.sha256(open(je.__spec__.origin, "rb").read()).hexdigest(),
        }))
        """
    )
    out = last_json(proc)
    status = out["status"]
    assert status["state"] == "patched" and status["known"] and status["thunder_version"]
    assert status["patches"] and status["reason"] is None
    assert out["file"].endswith("thunder/core/jit_ext.py")
    assert out["code_file"] == out["dunder_file"] == out["file"] + " (patched by thunder-overlay)"
    assert out["source_has_patch"] and out["linecache"]
    assert out["disk_sha"] == status["base_sha256"], "the file on disk is never modified"


def test_traceback_shows_patched_lines():
    proc = run_python(
        """
        import traceback, thunder.core.jit_ext as je
        try:
            je.ProxyRenames()[None]
        except Exception:
            traceback.print_exc()
        """
    )
    assert "(patched by thunder-overlay)" in proc.stderr
    assert "if v not in self:" in proc.stderr or "entry = self._renames.get(id(v.proxy))" in proc.stderr


def test_switched_off_gives_stock_module():
    proc = run_python(
        """
        import json, sys, thunder.core.jit_ext as je, thunder_overlay
        print(json.dumps({"patched": hasattr(je, "ProxyRenames"), "finders": [type(f).__name__ for f in sys.meta_path],
                          "status": thunder_overlay.status()}))
        """,
        overlay="0",
    )
    out = last_json(proc)
    assert not out["patched"] and "JitExtFinder" not in out["finders"]
    assert out["status"]["state"] == "disabled"


def test_start_up_hook_imports_neither_thunder_nor_torch_and_runs_once():
    proc = run_python(
        """
        import json, site, sys
        for p in list(sys.path):
            if p.endswith("site-packages"):
                site.addsitedir(p)  # processes the .pth a second time
        print(json.dumps({"heavy": sorted(m for m in ("torch", "thunder", "thunder_overlay.finder") if m in sys.modules),
                          "finders": [type(f).__name__ for f in sys.meta_path].count("JitExtFinder")}))
        """
    )
    out = last_json(proc)
    assert out == {"heavy": [], "finders": 1}


def test_status_before_import_is_a_dry_run_that_imports_nothing_heavy():
    proc = run_python(STATUS, "import sys; assert 'torch' not in sys.modules and 'thunder' not in sys.modules")
    assert last_json(proc)["state"] == "ready"


def test_cli_status_reports_patched_and_disabled():
    code = "import sys; from thunder_overlay.cli import main; sys.exit(main(['status']))"
    on = run_python(code)
    assert on.returncode == 0 and on.stdout.startswith("thunder-overlay: patched"), on.stdout + on.stderr
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
