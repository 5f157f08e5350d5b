"""The regression gate's own logic (tools/gate.py, tools/gatelib), on real pytest runs of small test files.

The files below read THUNDER_OVERLAY, as the gate sets it per side, so one file behaves differently on the
stock and the overlay side without importing thunder. Only the end-to-end command test and the discovery
test touch thunder (the command probes which thunder each side imports).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

TOOLS = Path(__file__).resolve().parents[1] / "tools"
sys.path.insert(0, str(TOOLS))

import gate  # noqa: E402
from gatelib import outcomes, plan, report  # noqa: E402
from gatelib.runner import Runner  # noqa: E402

MODULES = {
    # passes stock; with the overlay: one regression, one improvement, one timeout, one failure that goes away
    "test_tiny": """
        import os, time, pathlib
        import pytest

        OVERLAY = os.environ["THUNDER_OVERLAY"] == "1"
        SEEN = pathlib.Path(__file__).with_name("flaky-seen")

        def test_same():
            pass

        def test_regress():
            assert not OVERLAY, "the overlay breaks this"

        def test_improve():
            assert OVERLAY, "stock breaks this"

        def test_slow_with_overlay():
            if OVERLAY:
                time.sleep(30)

        def test_flaky_with_overlay():
            if OVERLAY and not SEEN.exists():
                SEEN.write_text("failed once")
                raise AssertionError("fails the first time only")

        @pytest.mark.skip(reason="never runs")
        def test_skip():
            pass

        @pytest.mark.xfail(reason="known")
        def test_xfail():
            assert False

        @pytest.mark.parametrize("i", range(40))
        def test_many(i):
            pass

        def test_on_cuda():  # deselected by the gate's -k "not cuda"
            pass
    """,
    # collects stock only
    "test_overlay_breaks_import": """
        import os
        if os.environ["THUNDER_OVERLAY"] == "1":
            import a_module_that_does_not_exist

        def test_ok():
            pass
    """,
    # what thunder's CUDA-only modules look like on CPU: every test skips, or -k "not cuda" selects none
    "test_needs_gpu": """
        import pytest

        @pytest.mark.skip(reason="requires CUDA")
        def test_kernel():
            pass
    """,
    "test_only_cuda_names": """
        def test_cuda_kernel():
            pass
    """,
    # collects on neither side, with a message of several lines as pytest's parametrize errors have
    "test_never_collects": """
        import pytest

        @pytest.mark.parametrize("a, b", [("one",)])
        def test_x(a, b):
            pass
    """,
}


@pytest.fixture
def root(tmp_path):
    """A --test-root with the modules above and an (empty) conftest of its own."""
    folder = tmp_path / "root"
    folder.mkdir()
    (folder / "conftest.py").write_text("")
    for name, text in MODULES.items():
        (folder / f"{name}.py").write_text(textwrap.dedent(text))
    return folder


def runner_for(root, *argv):
    args = gate.parse_args(["--test-root", str(root), "-n", "0", "--timeout", "2", *argv])
    raw = root.parent / "raw"
    raw.mkdir(exist_ok=True)
    # these runs never import thunder, so there is nothing to probe: the plugin records thunder None
    return Runner(args, raw, probes={"stock": {}, "overlay": {}})


def both_sides(runner, unit, ids=None):
    return {side: runner.run(unit, side, ids) for side in ("stock", "overlay")}


def test_outcomes_compared_per_test_id_and_regressions_confirmed(root):
    runner = runner_for(root)
    unit = plan.Unit("test_tiny")
    runs = both_sides(runner, unit)
    st, ov = runs["stock"], runs["overlay"]
    assert st["meta"]["thunder"] is None and st["finished"] == 1 and st["total"] == 47  # 48 minus test_on_cuda
    assert outcomes.outcome_of(ov["results"], "test_tiny.py::test_slow_with_overlay") == "timeout"
    assert outcomes.outcome_of(st["results"], "test_tiny.py::test_xfail") == "xfailed"
    assert outcomes.outcome_of(st["results"], "test_tiny.py::test_skip") == "skipped"

    found = outcomes.compare("test_tiny", st, ov, allow={})
    assert {(e["id"], e["stock"], e["overlay"]) for e in found["regressions"]} == {
        ("test_tiny.py::test_regress", "passed", "failed"),
        ("test_tiny.py::test_slow_with_overlay", "passed", "timeout"),
        ("test_tiny.py::test_flaky_with_overlay", "passed", "failed"),
    }
    assert [(e["id"], e["stock"], e["overlay"]) for e in found["improvements"]] == [
        ("test_tiny.py::test_improve", "failed", "passed")]
    msgs = {e["id"]: e["msg"] for e in found["regressions"]}
    assert "the overlay breaks this" in msgs["test_tiny.py::test_regress"]
    assert "Timeout (>2.0s) from pytest-timeout" in msgs["test_tiny.py::test_slow_with_overlay"]
    assert found["other_changes"] == [] and found["identical"] == 47 - 4

    again = both_sides(runner, unit, ids=[e["id"] for e in found["regressions"]])
    assert again["stock"]["total"] == 3  # only the regressed tests ran again
    kept, flaky = outcomes.confirm(found["regressions"], again["stock"]["results"], again["overlay"]["results"])
    assert [(e["id"], e["rerun"]) for e in kept] == [("test_tiny.py::test_regress", "passed -> failed"),
                                                     ("test_tiny.py::test_slow_with_overlay", "passed -> timeout")]
    assert [(e["id"], e["rerun"]) for e in flaky] == [("test_tiny.py::test_flaky_with_overlay", "passed -> passed")]


def test_allowlisted_regression_does_not_count(root, tmp_path):
    runner = runner_for(root)
    runs = both_sides(runner, plan.Unit("test_tiny", kexpr="regress"))
    allow_file = tmp_path / "allow.txt"
    allow_file.write_text("test_tiny.py::test_regress  # asserts on a name the overlay changes on purpose\n")
    found = outcomes.compare("test_tiny", runs["stock"], runs["overlay"], outcomes.load_allowlist(allow_file))
    assert found["regressions"] == []
    assert [(e["id"], e["why"]) for e in found["allowlisted"]] == [
        ("test_tiny.py::test_regress", "asserts on a name the overlay changes on purpose")]
    allow_file.write_text("test_tiny.py::test_regress\n")
    with pytest.raises(ValueError, match="without a reason"):
        outcomes.load_allowlist(allow_file)


def test_collection_errors_on_one_side_regress_on_both_sides_are_reported(root):
    runner = runner_for(root)
    one = both_sides(runner, plan.Unit("test_overlay_breaks_import"))
    assert outcomes.collect_status(one["stock"]) == "ok"
    assert outcomes.collect_status(one["overlay"]) == "not collectable"
    found = outcomes.compare("test_overlay_breaks_import", one["stock"], one["overlay"], allow={})
    # one regression for the module, not one per test that went missing with it
    assert [(e["id"], e["stock"], e["overlay"], e["msg"]) for e in found["regressions"]] == [
        ("test_overlay_breaks_import.py::<collection>", "collected", "collection error",
         "ModuleNotFoundError: No module named 'a_module_that_does_not_exist'")]

    both = both_sides(runner, plan.Unit("test_never_collects"))
    assert [outcomes.collect_status(r) for r in both.values()] == ["not collectable", "not collectable"]
    assert outcomes.compare("test_never_collects", both["stock"], both["overlay"], allow={})["regressions"] == []
    assert runner.reusable(both["stock"], runner.selection(plan.Unit("test_never_collects"), "stock", None), "stock")
    # pytest's parametrize errors span lines; the reason is all of it on one line
    (reason,) = [e["reason"] for e in both["stock"]["collect_errors"].values()]
    assert reason == ("test_never_collects.py::test_x: in \"parametrize\" the number of names (2): ['a', 'b'] "
                      "must be equal to the number of values (1): ('one',)")


def test_shards_cover_every_collected_test_exactly_once(root):
    whole = runner_for(root, "--collect-only").run(plan.Unit("test_tiny"), "stock")["collected"]
    assert len(whole) == 47
    shards = [runner_for(root, "--collect-only").run(plan.Unit("test_tiny", index=i, count=3), "stock")["collected"]
              for i in (1, 2, 3)]
    assert sorted(sum(shards, [])) == sorted(whole)  # every id once: no overlap, nothing lost
    assert all(shards) and [outcomes.shard_of(t, 3) for t in shards[1]] == [2] * len(shards[1])
    # with pytest-xdist the workers apply the same selection
    ran = runner_for(root, "-n", "2").run(plan.Unit("test_tiny", kexpr="many", index=2, count=3), "stock")
    assert sorted(outcomes.test_part(t) for t in ran["results"]) == sorted(t for t in shards[1] if "many" in t)
    assert ran["total"] == len(ran["results"])
    assert ran["meta"]["process"] in ("gw0", "gw1")  # what a worker, which ran the tests, imported


def test_resume_reuses_finished_runs_and_reruns_unfinished_ones(root):
    runner = runner_for(root)
    unit = plan.Unit("test_tiny", kexpr="same or many")
    first = runner.run(unit, "stock")
    assert first["reused"] is None and len(first["results"]) == 41

    resumed = runner_for(root, "--resume")
    again = resumed.run(unit, "stock")
    assert again["reused"] and again["results"] == first["results"] and again["path"] == first["path"]
    assert runner_for(root, "--resume", "-n", "2").run(unit, "stock")["reused"]  # fewer or more workers: same tests

    # a run cut off before its end (no 'finished' and no trailer) is run again
    lines = first["path"].read_text().splitlines()
    first["path"].write_text("\n".join(line for line in lines if '"finished"' not in line and '"complete"' not in line))
    assert resumed.run(unit, "stock")["reused"] is None
    # another selection is another file; without --resume nothing is reused
    assert resumed.run(plan.Unit("test_tiny", kexpr="same"), "stock")["path"] != first["path"]
    assert runner_for(root).run(unit, "stock")["reused"] is None


def test_reuse_requires_the_same_thunder_torch_and_patches(root):
    runner = runner_for(root)
    unit = plan.Unit("test_tiny", kexpr="same")
    run = runner.run(unit, "overlay")
    sel = runner.selection(unit, "overlay", None)
    seen = {"thunder": "0.2.6", "thunder_file": "/x/thunder/__init__.py", "torch": "2.9.1",
            "overlay": {"state": "patched", "patches": ["0001.patch"], "patched_sources_sha256": "aaaa"}}
    run["meta"] = dict(run["meta"], **seen)  # as if this run had imported thunder with the overlay
    runner.probes["overlay"] = dict(seen)
    assert runner.reusable(run, sel, "overlay")
    runner.probes["overlay"] = dict(seen, overlay=dict(seen["overlay"], patched_sources_sha256="bbbb"))  # other patches
    assert not runner.reusable(run, sel, "overlay")
    runner.probes["overlay"] = dict(seen, torch="2.10.0")
    assert not runner.reusable(run, sel, "overlay")


def write_summary(folder: Path, thunder: str, seconds: dict, quick: bool = False) -> Path:
    """A run's overall summary as the gate writes it (report.overall), with these module times and test counts:
    seconds {module: (stock seconds, overlay seconds, tests)}."""
    modules = {}
    for module, (stock, overlay, tests) in seconds.items():
        sides = {side: {**outcomes.counts({}), "passed": tests, "tests": tests, "seconds": s, "returncode": 0,
                        "collect": "ok", "reused": False} for side, s in (("stock", stock), ("overlay", overlay))}
        modules[module] = {**sides, **{k: [] for k in report.LISTS + ["infra_errors"]}, "identical": tests}
    folder.mkdir(parents=True)
    path = folder / f"gate-{thunder}.json"
    path.write_text(json.dumps(report.overall(modules, {"thunder": thunder, "quick": quick, "complete": True})))
    return path


def test_eta_from_earlier_module_times(tmp_path):
    grad, ov = 1800.0, 1900.0
    write_summary(tmp_path / "gate-0.2.5", "0.2.5", {"test_grad": (grad, ov, 426), "test_core": (19.0, 20.0, 173)})
    write_summary(tmp_path / "gate-0.2.5-quick", "0.2.5", {"test_grad": (5.0, 5.0, 10)}, quick=True)
    durations = report.history([tmp_path / "gate-0.2.5"], quick=False)["seconds"]
    assert durations == {("test_grad", "stock"): grad, ("test_grad", "overlay"): ov,
                         ("test_core", "stock"): 19.0, ("test_core", "overlay"): 20.0}
    assert report.history([tmp_path / "gate-0.2.5-quick"], quick=False)["seconds"] == {}  # only runs of one kind
    # a run that reused its stock side records 0 seconds there: the overlay side's time stands in for it
    write_summary(tmp_path / "gate-0.2.6-reused", "0.2.6", {"test_core": (0, 20.0, 173)})
    reused = report.history([tmp_path / "gate-0.2.6-reused"], quick=False)["seconds"]
    assert reused[("test_core", "stock")] == reused[("test_core", "overlay")] == 20.0

    a, b = plan.Unit("test_grad", index=1, count=2), plan.Unit("test_grad", index=2, count=2)
    new = plan.Unit("test_new")
    eta = report.Eta([(a, "stock"), (a, "overlay"), (b, "stock"), (new, "stock")], durations, {"test_new": 10})
    assert eta.remaining() == (pytest.approx(grad + ov / 2), 1)  # halves of test_grad; test_new: no rate yet
    # the first half took as long as the whole did before (a machine twice as busy), for 100 tests
    eta.finished((a, "stock"), grad, grad, 100)
    # its overlay side: as long as its stock side; the other half: scaled by 2; test_new: 10 tests at this rate
    assert eta.remaining() == (pytest.approx(grad + grad + grad / 10), 0)
    # the running task: from tests done / tests selected, once a tenth is done; before, from its estimate
    assert eta.remaining((b, "stock"), elapsed=100, done=25, total=100) == (pytest.approx(300 + grad + grad / 10), 0)
    assert eta.remaining((b, "stock"), elapsed=100, done=5, total=100) == (pytest.approx(grad - 100 + grad + grad / 10), 0)


def test_earlier_runs_are_found_by_the_thunder_they_ran(tmp_path):
    # upstream main reports a dev version; its run is named after main, and still feeds main's ETA
    for folder, thunder in (("gate-main", "0.2.7.dev0"), ("gate-0.2.6", "0.2.6"), ("gate-0.2.6-quick", "0.2.6"),
                            ("gate-0.2.5", "0.2.5")):
        write_summary(tmp_path / folder, thunder, {"test_core": (1.0, 1.0, 1)}, quick=folder.endswith("quick"))
    (tmp_path / "gate-broken").mkdir()
    (tmp_path / "gate-broken" / "gate-0.2.6.json").write_text("{not json")
    assert report.results_of(tmp_path, "0.2.7.dev0") == [tmp_path / "gate-main"]
    assert report.results_of(tmp_path, "0.2.6") == [tmp_path / "gate-0.2.6", tmp_path / "gate-0.2.6-quick"]


def test_discovers_the_modules_thunder_ships():
    import thunder.tests

    found = plan.discover(Path(thunder.tests.__file__).parent)
    assert {"test_ops", "test_grad", "test_core", "distributed.test_ops", "distributed.test_ddp"} <= set(found)
    assert not [m for m in found if not m.split(".")[-1].startswith("test_")]  # no framework.py, conftest.py
    assert outcomes.norm_id("distributed.test_ops", "x/thunder/tests/distributed/test_ops.py::test_a[cpu]") \
        == "distributed/test_ops.py::test_a[cpu]"


@pytest.mark.slow
def test_command_end_to_end_with_resume_and_report(root):
    out = root.parent / "out"
    cmd = [sys.executable, str(TOOLS / "gate.py"), "--test-root", str(root), "--out", str(out), "-n", "0",
           "--timeout", "2", "--modules", "test_tiny", "test_never_collects", "test_needs_gpu", "test_only_cuda_names", "-k", "not slow", "--markdown"]
    first = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert first.returncode == 1, first.stdout + first.stderr  # test_regress is a regression
    (summary_file,) = out.glob("gate-*.json")
    summary = json.loads(summary_file.read_text())
    assert summary["complete"] and [e["id"] for e in summary["regressions"]] == ["test_tiny.py::test_regress"]
    assert [e["id"] for e in summary["flaky"]] == ["test_tiny.py::test_flaky_with_overlay"]
    assert summary["not_collectable"]["test_never_collects"]["stock"].startswith(
        "test_never_collects.py::test_x: in \"parametrize\"")
    tiny = json.loads((out / "modules" / "test_tiny.json").read_text())
    assert tiny["stock"]["tests"] == tiny["overlay"]["tests"] == 46
    assert (tiny["stock"]["passed"], tiny["overlay"]["passed"], tiny["overlay"]["failed"]) == (43, 42, 2)
    # test_regress, test_flaky_with_overlay and test_improve differ; test_needs_gpu's one test skips
    assert summary["totals"] == {"modules": 4, "modules_with_tests": 2, "modules_without_tests": 1,
                                 "modules_all_skipped": 1, "not_collectable": 1,
                                 "tests": {"stock": 47, "overlay": 47}, "identical": 47 - 3,
                                 "seconds": summary["totals"]["seconds"]}
    assert "47 stock / 47 overlay, 44 ids with one outcome on both sides" in first.stdout
    assert {p.suffix for p in (out / "raw").iterdir()} == {".jsonl", ".log", ".ids"}  # raw output only in raw/
    assert "| test_tiny | 46 / 46 | 43 / 42 | 1 / 2 |" in first.stdout
    assert "| test_never_collects | not collectable on both sides: test_never_collects.py::test_x:" in first.stdout
    known = report.history([out], quick=False)  # what a later run takes for its ETA and --xdist-min-seconds
    assert known["tests"] == {"test_tiny": 46, "test_never_collects": 0, "test_needs_gpu": 1, "test_only_cuda_names": 0}
    assert known["seconds"][("test_tiny", "overlay")] == tiny["overlay"]["seconds"] > 0

    (root / "flaky-seen").unlink()  # the overlay side would fail it again if it ran again: it must not run
    resumed = subprocess.run(cmd + ["--resume"], capture_output=True, text=True, timeout=300)
    assert resumed.returncode == 1 and resumed.stdout.count("reused from") == 8, resumed.stdout
    assert "(8 of 8 runs reused)" in resumed.stdout
    assert json.loads((out / "modules" / "test_tiny.json").read_text())["regressions"] == tiny["regressions"]

    shown = subprocess.run([sys.executable, str(TOOLS / "gate.py"), "--report", str(out)], capture_output=True,
                           text=True, timeout=60)
    assert shown.returncode == 0 and "| test_tiny | 46 / 46 |" in shown.stdout and "REGRESSIONS (1)" in shown.stdout


@pytest.mark.slow
def test_copied_thunder_test_module_runs_from_test_root(tmp_path):
    """Issue 13 runs patched copies of thunder's test modules: a plain copy must give the same ids as --pyargs."""
    import thunder.tests

    shutil.copy(Path(thunder.tests.__file__).parent / "test_autocast.py", tmp_path)
    ids = {}
    for how, extra in (("copy", ["--test-root", str(tmp_path)]), ("pyargs", [])):
        args = gate.parse_args([*extra, "-n", "0"])
        raw = tmp_path / f"raw-{how}"
        raw.mkdir()
        run = Runner(args, raw, probes={"stock": {}, "overlay": {}}).run(plan.Unit("test_autocast", "mixed_dtype_inputs"),
                                                                         "stock")
        assert run["finished"] == 0 and run["meta"]["thunder"], run["path"].with_suffix(".log").read_text()
        ids[how] = {tid: r["outcome"] for tid, r in run["results"].items()}
    assert ids["copy"] == ids["pyargs"] == {"test_autocast.py::test_autocast_mixed_dtype_inputs": "passed",
                                            "test_autocast.py::test_autocast_mixed_dtype_inputs_on_prims": "passed"}


def test_skip_reasons_are_counted_per_side(root):
    runner = runner_for(root)
    run = runner.run(plan.Unit("test_tiny", "not slow"), "stock")
    summary = report.side_summary(report.merge_runs([run]))
    assert summary["skipped"] == 1 and summary["skip_reasons"] == {"never runs": 1}, summary


@pytest.mark.slow
@pytest.mark.parametrize("gloo", [True, False], ids=["gloo", "no-gloo"])
def test_gloo_plugin_instantiates_the_cpu_variants_of_thunders_distributed_tests(tmp_path, gloo):
    """thunder instantiates its distributed_wrapper tests for CUDA only; gatelib.gloo adds their CPU variants
    (gloo through thunder/tests/distributed/helper.py), for the distributed modules only."""
    args = gate.parse_args(["--collect-only", "-n", "0", *([] if gloo else ["--no-gloo"])])
    runner = Runner(args, tmp_path, probes={"stock": {}, "overlay": {}})
    run = runner.run(plan.Unit("distributed.test_ddp"), "stock")
    assert run["finished"] == 0, run["path"].with_suffix(".log").read_text()[-3000:]
    cpu = sorted(t for t in run["collected"] if "_cpu_" in t)
    if gloo:
        assert "test_native_ddp_torch_cpu_thunder.dtypes.float32[0]" in " ".join(cpu), cpu
        assert runner.selection(plan.Unit("distributed.test_ddp"), "stock", None)["gloo"] is True
    else:
        assert cpu == [], cpu
    assert "gloo" not in runner.selection(plan.Unit("test_core"), "stock", None)
