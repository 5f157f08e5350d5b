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
from gatelib import outcomes, plan, report, status, store  # noqa: E402
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
    # two tests of a second of CPU each, in whichever process runs them
    "test_busy": """
        import time

        def busy():
            end = time.process_time() + 1
            while time.process_time() < end:
                pass

        def test_busy_one():
            busy()

        def test_busy_two():
            busy()
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
    runs = both_sides(runner, plan.Unit("test_tiny", kexpr="regress or improve"))
    allow_file = tmp_path / "allow.txt"
    allow_file.write_text("test_tiny.py::test_regress  # asserts on a name the overlay changes on purpose\n"
                          "test_tiny.py::test_improve  # flaky on stock\n")
    found = outcomes.compare("test_tiny", runs["stock"], runs["overlay"], outcomes.load_allowlist(allow_file))
    assert found["regressions"] == []
    assert [(e["id"], e["why"]) for e in found["allowlisted"]] == [
        ("test_tiny.py::test_regress", "asserts on a name the overlay changes on purpose")]
    # an explained improvement stays an improvement, listed with its reason
    assert [(e["id"], e["why"]) for e in found["improvements"]] == [("test_tiny.py::test_improve", "flaky on stock")]
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


def test_resume_reuses_stored_units_and_reruns_unfinished_ones(root):
    runner = runner_for(root)
    unit = plan.Unit("test_tiny", kexpr="same or many")
    first = runner.run(unit, "overlay")
    assert first["reused"] is None and len(first["results"]) == 41
    assert runner_for(root).run(unit, "overlay")["reused"] is None  # the overlay side: reused with --resume only

    resumed = runner_for(root, "--resume")
    again = resumed.run(unit, "overlay")
    assert again["reused"] and outcomes_of(again) == outcomes_of(first) and again["total"] == first["total"]
    assert runner_for(root, "--resume", "-n", "2").run(unit, "overlay")["reused"]  # fewer or more workers: same tests

    # a unit whose pytest did not end by itself is stored as such, and run again
    file = store.path(root.parent, "overlay")
    file.write_text(file.read_text().replace("finished = 0", "finished = no"))
    assert resumed.run(unit, "overlay")["reused"] is None
    assert store.read(file)["blocks"]["test_tiny"]["finished"] == 0  # and replaced

    # confirming reruns are not stored: --resume takes them from raw/ while a finished one is there
    ids = ["test_tiny.py::test_same"]
    rerun = resumed.run(unit, "stock", ids=ids)
    assert resumed.run(unit, "stock", ids=ids)["path"] == rerun["path"]
    lines = rerun["path"].read_text().splitlines()
    rerun["path"].write_text("\n".join(line for line in lines if '"finished"' not in line and '"complete"' not in line))
    assert resumed.run(unit, "stock", ids=ids)["reused"] is None
    assert list(store.read(store.path(root.parent, "stock"))["blocks"]) == []


def outcomes_of(run):
    return {tid: (r["outcome"], store.one_line(r["msg"])) for tid, r in run["results"].items()}


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


def fake_run(results, collect_errors=None, finished=1, returncode=1):
    """A run as runner.Runner.run returns it, for the store: {test id: (outcome, msg)}."""
    return {"total": len(results), "finished": finished, "returncode": returncode,
            "meta": {"jit_ext": "/x/thunder/core/jit_ext.py via thunder_overlay.engine.PatchedSourceLoader"},
            "collect_errors": {part: {"reason": why} for part, why in (collect_errors or {}).items()},
            "results": {tid: {"outcome": o, "msg": msg} for tid, (o, msg) in results.items()}}


KEY = {"thunder": "0.2.6", "thunder_tree": "a" * 64, "torch": "2.9.1", "python": "3.11.7", "plugin": "1",
       "k": "not cuda", "timeout": "900"}


def test_store_round_trip_sorted_atomic_and_replaced_on_a_new_key(tmp_path, monkeypatch):
    file = store.path(tmp_path / "out", "overlay")
    traceback = "    def test_b():\n        E = 1\n>       assert False, 'no'\nE   AssertionError: at 0x7f00deadbeef " \
        + "x" * 200 + "\nE   assert False\n\ntest_m.py:3: AssertionError"
    run = fake_run({"test_m.py::test_c": ("skipped", "Skipped: requires CUDA"), "test_m.py::test_a": ("passed", ""),
                    "test_m.py::test_b[a b]": ("failed", traceback)}, collect_errors={"TestX": "ImportError: no"})
    series = {"base": "0.2.6", "files": {"thunder/core/a.py": {"0001-a.patch": "b" * 64}}}
    name = store.digest(series)
    shard2 = store.block_of(plan.Unit("test_m", index=2, count=2), dict(KEY, series=name), run)
    store.put(file, shard2, {name: series})
    store.put(file, store.block_of(plan.Unit("test_m", index=1, count=2), dict(KEY, series=name), fake_run({})))
    store.put(file, store.block_of(plan.Unit("test_a"), dict(KEY, series=name), fake_run({}, returncode=5)))
    back = store.read(file)
    assert back["blocks"]["test_m #2/2"] == shard2 and back["series"] == {name: series}
    reason = shard2["results"]["test_b[a b]"][1]  # the exception's line, not pytest's details; no address
    assert reason == ("AssertionError: at 0x? " + "x" * 200)[:117] + "..." and len(reason) == store.REASON_CHARS
    assert shard2["results"]["test_c"] == ("skipped", "requires CUDA") and shard2["loader"].endswith("SourceLoader")
    text = file.read_text()
    assert [line for line in text.splitlines() if line.startswith("[")] == [
        f"[series {name}]", "[unit test_a]", "[unit test_m #1/2]", "[unit test_m #2/2]"]
    assert '  "test_b[a b]" failed AssertionError: at 0x? xxx' in text and "  test_c skipped requires CUDA" in text
    assert "collect_error = TestX ImportError: no" in text and "seconds" not in text
    tests = [line for line in text.splitlines() if line.startswith("  ")]
    assert tests == ["  test_a passed", '  "test_b[a b]" failed ' + reason, "  test_c skipped requires CUDA"]
    assert store.dumps(back) == text  # written again, the same text

    # another key replaces the unit's block; its old series goes with the last block that named it
    other = {"base": "0.2.6", "files": {"thunder/core/a.py": {"0001-a.patch": "c" * 64}}}
    for unit in (plan.Unit("test_a"), plan.Unit("test_m", index=1, count=2), plan.Unit("test_m", index=2, count=2)):
        store.put(file, store.block_of(unit, dict(KEY, series=store.digest(other)), fake_run({})),
                  {store.digest(other): other})
    back = store.read(file)
    assert list(back["series"]) == [store.digest(other)] and len(back["blocks"]) == 3
    assert all(b["key"]["series"] == store.digest(other) for b in back["blocks"].values())
    # another shard count drops the module's blocks of the old one
    store.put(file, store.block_of(plan.Unit("test_m"), KEY, fake_run({})))
    assert sorted(store.read(file)["blocks"]) == ["test_a", "test_m"]

    # atomic: a write that fails leaves the file as it was, and no temporary file
    before = file.read_text()
    monkeypatch.setattr(store.os, "replace", lambda *a: (_ for _ in ()).throw(OSError("disk full")))
    with pytest.raises(OSError):
        store.put(file, store.block_of(plan.Unit("test_z"), KEY, fake_run({})))
    assert file.read_text() == before and sorted(p.name for p in file.parent.iterdir()) == [
        ".outcomes.lock", "overlay.outcomes"]


def test_stored_stock_is_reused_until_its_key_changes(root, monkeypatch):
    unit = plan.Unit("test_tiny", kexpr="same")
    assert runner_for(root).run(unit, "stock")["reused"] is None
    assert runner_for(root).run(unit, "stock")["reused"]  # the default, without --resume
    assert runner_for(root, "--rerun-stock").run(unit, "stock")["reused"] is None
    assert runner_for(root, "--timeout", "3").run(unit, "stock")["reused"] is None  # another selection

    (root / "test_tiny.py").write_text((root / "test_tiny.py").read_text() + "\n# another test file\n")
    assert runner_for(root).run(unit, "stock")["reused"] is None
    assert runner_for(root).run(unit, "stock")["reused"]

    monkeypatch.setattr("gatelib.runner.PLUGIN_VERSION", "999")  # a plugin that records otherwise
    assert runner_for(root).run(unit, "stock")["reused"] is None
    (block,) = store.read(store.path(root.parent, "stock"))["blocks"].values()  # the old block was replaced
    assert block["key"]["plugin"] == "999" and block["key"]["test_file"] == plan.file_sha256(root / "test_tiny.py")

    for field, value in (("torch", "2.10.0"), ("python", "3.12.1"), ("thunder_tree", "f" * 64)):
        runner = runner_for(root)
        runner.probes["stock"] = {field: value}
        assert runner.run(unit, "stock")["reused"] is None, field


def test_a_units_wall_and_cpu_seconds_go_with_its_stored_run(root):
    unit = plan.Unit("test_busy")
    ran = runner_for(root, "-n", "2").run(unit, "stock")
    # the two seconds the tests spent in xdist's workers count: CPU of the processes pytest waited for
    assert ran["seconds"] > 0 and 2 <= ran["cpu_seconds"] < 60 and ran["results"]
    assert json.loads(ran["path"].read_text().splitlines()[-1])["cpu_seconds"] == ran["cpu_seconds"]
    (line,) = [x for x in store.times_path(root.parent, "stock").read_text().splitlines() if not x.startswith("#")]
    block = store.read(store.path(root.parent, "stock"))["blocks"]["test_busy"]
    assert line.startswith(f"test_busy = {block['digest']} ")
    reused = runner_for(root).run(unit, "stock")
    assert reused["reused"] and (reused["seconds"], reused["cpu_seconds"]) == (ran["seconds"], ran["cpu_seconds"])

    # a store from before the times files: the raw run of the same selection that gave the stored outcomes
    # times it (without CPU, which those runs did not record), and is written down; without it, no time
    store.times_path(root.parent, "stock").unlink()
    lines = ran["path"].read_text().splitlines()
    trailer = json.loads(lines[-1])
    del trailer["cpu_seconds"]
    ran["path"].write_text("\n".join(lines[:-1] + [json.dumps(trailer)]) + "\n")
    again = runner_for(root).run(unit, "stock")
    assert (again["seconds"], again["cpu_seconds"]) == (ran["seconds"], None)
    assert "cpu=-" in store.times_path(root.parent, "stock").read_text()
    store.times_path(root.parent, "stock").unlink()
    ran["path"].unlink()
    assert runner_for(root).run(unit, "stock")["seconds"] is None

    # times under another key do not time the stored run
    store.put_time(root.parent, "stock", unit.label, "0" * 16, 5.0, 9.0)
    assert store.time_of(root.parent, "stock", block) == (None, None)
    store.put_time(root.parent, "stock", unit.label, block["digest"], 5.0, 9.0)
    assert store.time_of(root.parent, "stock", block) == (5.0, 9.0)


def test_a_new_series_reruns_the_overlay_side_only(root):
    def probes(patch_sha, sources):
        side = {"thunder": "0.2.6", "thunder_tree": "a" * 64, "torch": "2.9.1", "python": "3.11.7"}
        series = {"base": "0.2.6", "files": {"thunder/core/jit_ext.py": {"0001-a.patch": patch_sha}}}
        overlay = {"state": "patched", "version": "0.2.0", "patches": ["0001-a.patch"], "series": series,
                   "patched_sources_sha256": sources}
        return {"stock": side, "overlay": dict(side, overlay=overlay)}

    unit = plan.Unit("test_tiny", kexpr="same or regress")
    for expected in ({"stock": None, "overlay": None}, {"stock": True, "overlay": True}):
        runner = runner_for(root, "--resume")
        runner.probes = probes("b" * 64, "1111")
        assert {side: r["reused"] and True for side, r in both_sides(runner, unit).items()} == expected

    runner = runner_for(root, "--resume")
    runner.probes = probes("c" * 64, "2222")  # another series: other patch files, other patched sources
    runs = both_sides(runner, unit)
    assert runs["stock"]["reused"] and runs["overlay"]["reused"] is None
    assert outcomes.outcome_of(runs["stock"]["results"], "test_tiny.py::test_regress") == "passed"
    overlay = store.read(store.path(root.parent, "overlay"))
    (name,) = overlay["series"]
    assert overlay["series"][name]["files"]["thunder/core/jit_ext.py"] == {"0001-a.patch": "c" * 64}
    assert overlay["blocks"]["test_tiny"]["key"]["series"] == name == next(iter(runner.series("overlay")))
    assert overlay["blocks"]["test_tiny"]["key"]["patched_sources"] == "2222"


def test_report_is_rebuilt_from_the_stores_alone(root, capsys):
    runner = runner_for(root)
    for module, kexpr in (("test_tiny", "not slow"), ("test_overlay_breaks_import", None), ("test_needs_gpu", None)):
        both_sides(runner, plan.Unit(module, kexpr))
    shutil.rmtree(root.parent / "raw")
    summary = status.rebuild(root.parent, allow={})
    assert summary["complete"] and not summary["incomplete"]
    assert [(e["id"], e["msg"]) for e in summary["regressions"]] == [
        ("test_overlay_breaks_import.py::<collection>",
         "ModuleNotFoundError: No module named 'a_module_that_does_not_exist'"),
        ("test_tiny.py::test_flaky_with_overlay", "AssertionError: fails the first time only"),
        ("test_tiny.py::test_regress", "AssertionError: the overlay breaks this")]
    assert summary["modules"]["test_tiny"]["stock"]["skip_reasons"] == {"never runs": 1}
    assert summary["totals"]["tests"] == {"stock": 47 + 1, "overlay": 46 + 1}
    assert gate.main(["--report", str(root.parent)]) == 0
    shown = capsys.readouterr().out
    assert "rebuilt from stock.outcomes and overlay.outcomes" in shown and "| test_tiny | 46 / 46 |" in shown

    # a side that lacks a module: listed, not compared
    store_file = store.path(root.parent, "overlay")
    text = store_file.read_text()
    store_file.write_text(text[:text.index("[unit test_tiny]")])
    again = status.rebuild(root.parent, allow={})
    assert again["incomplete"] == {"test_tiny": ["overlay"]} and "test_tiny" not in again["modules"]


PATCH = """From 0000000000000000000000000000000000000000 Mon Sep 17 00:00:00 2001
Subject: [PATCH] a

---
diff --git a/thunder/core/a.py b/thunder/core/a.py
--- a/thunder/core/a.py
+++ b/thunder/core/a.py
@@ -1,1 +1,2 @@
 x = 1
+y = 2
"""


def test_status_says_which_series_and_which_modules_are_missing(tmp_path, capsys):
    patches = tmp_path / "patches"
    (patches / "0.2.6").mkdir(parents=True)
    (patches / "0.2.6" / "series").write_text("# applied in order\n0001-a.patch\n")
    (patches / "0.2.6" / "0001-a.patch").write_text(PATCH)
    fp = plan.series_fingerprint(patches / "0.2.6")
    assert fp == {"base": "0.2.6", "files": {"thunder/core/a.py": {"0001-a.patch": plan.file_sha256(
        patches / "0.2.6" / "0001-a.patch")}}}
    folder = tmp_path / "results" / "gate-0.2.6"
    write_summary(folder, "0.2.6", {m: (1.0, 1.0, 1) for m in ("test_a", "test_b", "test_c")})
    stock, overlay = store.path(folder, "stock"), store.path(folder, "overlay")
    store.put(stock, store.block_of(plan.Unit("test_a"), KEY, fake_run({})))
    store.put(stock, store.block_of(plan.Unit("test_b", index=1, count=2), KEY, fake_run({})))
    store.put(overlay, store.block_of(plan.Unit("test_a"), dict(KEY, series=store.digest(fp)), fake_run({})),
              {store.digest(fp): fp})
    store.put(overlay, store.block_of(plan.Unit("test_c"), dict(KEY, series=store.digest(fp)),
                                      fake_run({}, finished=None)), {store.digest(fp): fp})

    text = status.status_text(tmp_path / "results", patches, installed=(None, None))
    assert "gate-0.2.6: thunder 0.2.6, summary of None (complete, 3 modules)" in text
    assert "stock.outcomes:    not committed; torch 2.9.1, python 3.11.7, plugin 1" in text
    assert f"series:  {store.digest(fp)} (2 overlay units): the series patches/0.2.6 holds now" in text
    assert "stock:    1 of 3 modules stored; missing 2:\n             test_b, test_c\n" in text  # test_b: half
    assert "overlay:  1 of 3 modules stored; missing 2:\n             test_b, test_c\n" in text  # test_c: cut off

    (patches / "0.2.6" / "0001-a.patch").write_text(PATCH.replace("y = 2", "y = 3"))
    text = status.status_text(tmp_path / "results", patches, installed=(None, None))
    assert "NOT the series patches/0.2.6 holds now: 0001-a.patch changed" in text
    assert "overlay:  0 of 3 modules stored (1 more for another series: rerun); missing 2:" in text

    assert gate.main(["--status"]) == 0  # the repository's own folders
    assert "gate-0.2.6: thunder 0.2.6" in capsys.readouterr().out


def test_thunder_tree_digest_ignores_bytecode_only(tmp_path):
    (tmp_path / "thunder" / "core" / "__pycache__").mkdir(parents=True)
    (tmp_path / "thunder" / "core" / "a.py").write_text("x = 1\n")
    first = plan.tree_sha256(tmp_path / "thunder")
    (tmp_path / "thunder" / "core" / "__pycache__" / "a.cpython-311.pyc").write_bytes(b"\0")
    assert plan.tree_sha256(tmp_path / "thunder") == first
    (tmp_path / "thunder" / "core" / "b.py").write_text("")
    assert plan.tree_sha256(tmp_path / "thunder") != first


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
def test_command_end_to_end_with_resume_and_report(root, monkeypatch):
    out = root.parent / "out"
    cmd = [sys.executable, str(TOOLS / "gate.py"), "--test-root", str(root), "--out", str(out), "-n", "0",
           "--timeout", "2", "--modules", "test_tiny", "test_never_collects", "test_needs_gpu", "test_only_cuda_names", "-k", "not slow", "--markdown"]
    # the overlay side's key holds the series: a copy taken now, so that an edit of patches/ while this test
    # runs does not make the runs below rerun the overlay side
    from thunder_overlay import config

    shutil.copytree(config.patches_dir()[0], root.parent / "patches")
    monkeypatch.setenv(config.PATCHES_ENV, str(root.parent / "patches"))
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
                                 "seconds": summary["totals"]["seconds"],
                                 "cpu_seconds": summary["totals"]["cpu_seconds"],
                                 "untimed": {"stock": 0, "overlay": 0}, "cpu_untimed": {"stock": 0, "overlay": 0},
                                 "outcomes": summary["totals"]["outcomes"]}
    # test_tiny: 42 passed, 2 failed, 1 xfailed, 1 skipped (requires CUDA); test_needs_gpu: 1 skipped
    assert summary["totals"]["outcomes"]["overlay"] == {**outcomes.counts({}), "passed": 42, "failed": 2, "skipped": 2,
                                                        "xfailed": 1}
    assert "47 stock / 47 overlay, 44 ids with one outcome on both sides" in first.stdout
    assert {p.suffix for p in (out / "raw").iterdir()} == {".jsonl", ".log", ".ids"}  # raw output only in raw/
    assert "| test_tiny | 46 / 46 | 43 / 42 | 1 / 2 |" in first.stdout
    assert "| test_never_collects | not collectable on both sides: test_never_collects.py::test_x:" in first.stdout
    known = report.history([out], quick=False)  # what a later run takes for its ETA and --xdist-min-seconds
    assert known["tests"] == {"test_tiny": 46, "test_never_collects": 0, "test_needs_gpu": 1, "test_only_cuda_names": 0}
    assert known["seconds"][("test_tiny", "overlay")] == tiny["overlay"]["seconds"] > 0

    # the outcome store beside the summary, keyed by what the probes saw (the overlay side also by the series)
    assert {p.name for p in out.glob("*.outcomes")} == {"stock.outcomes", "overlay.outcomes"}
    assert len(summary["keys"]["stock"]["thunder_tree"]) == 64 and summary["keys"]["stock"]["python"].count(".") == 2
    assert summary["series"] is None or summary["series"]["digest"] == summary["keys"]["overlay"]["series"]

    (root / "flaky-seen").unlink()  # the overlay side would fail it again if it ran again: it must not run
    resumed = subprocess.run(cmd + ["--resume"], capture_output=True, text=True, timeout=300)
    assert resumed.returncode == 1 and resumed.stdout.count("reused from") == 8, resumed.stdout
    assert "(8 of 8 runs reused)" in resumed.stdout
    # a reused run keeps the times of the run it reuses (OUT/<side>.times)
    assert json.loads(summary_file.read_text())["totals"]["cpu_seconds"] == summary["totals"]["cpu_seconds"]
    # the same entries; a reused run's message is the store's one-line reason
    assert [dict(e, msg=store.one_line(e["msg"])) for e in tiny["regressions"]] == \
        json.loads((out / "modules" / "test_tiny.json").read_text())["regressions"]
    # without --resume only the stock side is reused
    again = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert again.returncode == 1 and "(4 of 8 runs reused)" in again.stdout, again.stdout
    assert again.stdout.count("[stock] reused from stock.outcomes") == 4

    shutil.rmtree(out / "raw")  # what git does not keep
    shutil.rmtree(out / "modules")
    shown = subprocess.run([sys.executable, str(TOOLS / "gate.py"), "--report", str(out)], capture_output=True,
                           text=True, timeout=60)
    assert shown.returncode == 0 and "| test_tiny | 46 / 46 |" in shown.stdout and "REGRESSIONS (1)" in shown.stdout
    assert "?" not in shown.stdout.split("| test_tiny |")[1].splitlines()[0]  # its wall and CPU times, from the store


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
