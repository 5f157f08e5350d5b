"""A series that changes several files of thunder: every file runs patched, or none does (I8).

The series is the shipped one plus a scratch patch (tools/scratch_series.py) that marks
thunder/core/interpreter.py, imported while `import thunder` runs, and a module of thunder.transforms that
only a later import loads (autodiff; cudagraph on 0.2.1/0.2.2, which have no autodiff), so that a test sees
which modules run patched. Real thunder,
fresh processes; the faults are real edited copies of thunder and a real hunk that does not apply."""

import json
import sys

import pytest

from conftest import (
    JIT_STILL_WORKS, RUNS_PATCHED, TOOLS, assert_strict_raises, copy_thunder, installed_base,
    installed_file, installed_form, last_json, refused, run_python,
)

sys.path.insert(0, str(TOOLS))
import scratch_series  # noqa: E402

EAGER = "thunder/core/interpreter.py"
LAZY = next(p for p in ("thunder/transforms/autodiff.py", "thunder/transforms/cudagraph.py") if installed_file(p).is_file())
OTHERS = [EAGER, LAZY]
MODULES = ["thunder.core.jit_ext", "thunder.core.interpreter", LAZY.removesuffix(".py").replace("/", ".")]
LAZY_MODULE = MODULES[2]

# Import thunder, then (later) the lazily imported module; report which modules run patched at each point,
# which carry the scratch patch's mark, the overlay's warnings and status.
PROBE = f"""
import json, sys, warnings
def runs_patched(name):
    m = sys.modules.get(name)
    return None if m is None else {RUNS_PATCHED}
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    import thunder
    after_import = {{name: runs_patched(name) for name in {MODULES!r}}}
    import {LAZY_MODULE}
import thunder_overlay
print(json.dumps({{
    "messages": [str(w.message) for w in caught if str(w.message).startswith("thunder-overlay:")],
    "after_import": after_import,
    "patched": runs_patched("thunder.core.jit_ext"),
    "runs_patched": {{name: runs_patched(name) for name in {MODULES!r}}},
    "marked": {{name: hasattr(sys.modules[name], {scratch_series.MARK.split(" =")[0]!r}) for name in {MODULES!r}}},
    "status": thunder_overlay.status(),
    "finder_answers_for": sorted(getattr(thunder_overlay._startup.installed_finder(), "targets", None) or []),
}}))
"""


@pytest.fixture(scope="module")
def scratch(tmp_path_factory):
    return scratch_series.build(tmp_path_factory.mktemp("scratch") / "patches", OTHERS)


@pytest.fixture(scope="module")
def scratch_broken(tmp_path_factory):
    """Per file of OTHERS: the scratch series whose hunk does not apply to that file (and applies to the rest)."""
    return {path: scratch_series.build(tmp_path_factory.mktemp("broken") / "patches", OTHERS, broken=path)
            for path in OTHERS}


def run_probe(env: dict, **kwargs):
    return run_python(PROBE, JIT_STILL_WORKS, env=env, **kwargs)


def none_patched(proc) -> dict:
    """One warning, no module of the series patched at any point, state refused, stock thunder jits."""
    out = refused(proc)
    assert set(out["after_import"].values()) <= {False, None} and not any(out["runs_patched"].values())
    assert not any(out["marked"].values())
    return out


def test_every_file_of_the_series_runs_patched_the_lazy_one_when_imported(scratch, tmp_path):
    env = {"THUNDER_OVERLAY_PATCHES": str(scratch), "THUNDER_OVERLAY_CACHE_DIR": str(tmp_path)}
    for bytecode_cache in ("written: ", "hit: "):  # the first process fills the cache, the second uses it
        out = last_json(run_probe(env))
        assert out["messages"] == [] and out["status"]["state"] == "patched"
        assert out["after_import"] == dict(zip(MODULES, [True, True, None])), "the lazy module waits for its import"
        assert all(out["runs_patched"].values())
        assert out["marked"] == {MODULES[0]: False, MODULES[1]: True, MODULES[2]: True}
        files = {f["module"]: f for f in out["status"]["files"]}
        assert set(MODULES) <= files.keys() and all(f["matches_base"] for f in files.values())
        assert all(f["patched"] == f["imported"] for f in files.values()), "every imported file of the series runs patched"
        assert [files[m]["path"] for m in MODULES] == [str(installed_file(p)) for p in ["thunder/core/jit_ext.py", *OTHERS]]
        assert out["status"]["bytecode_cache"].startswith(bytecode_cache)
        assert out["status"]["patches"][-1] == scratch_series.PATCH_NAME
        assert out["finder_answers_for"] == sorted(files), "after the decision the finder answers for targets only"


@pytest.mark.slow
def test_status_lists_every_file_before_the_lazy_one_is_imported(scratch):
    code = "import sys; from thunder_overlay.cli import main; sys.exit(main(['status']))"
    proc = run_python(code, env={"THUNDER_OVERLAY_PATCHES": str(scratch)})
    assert proc.returncode == 0, proc.stderr[-2000:]
    lines = [line.split(None, 1)[1] for line in proc.stdout.splitlines() if line.startswith("  file ")]
    sha = {p: installed_base(scratch).files[p][:12] for p in OTHERS}
    assert len(lines) == len(installed_base(scratch).files)
    assert [line for line in lines if line.split(":")[0] in MODULES] == [
        f"thunder.core.jit_ext: patched, sha256 {installed_base().files['thunder/core/jit_ext.py'][:12]} (the base's), "
        f"{installed_file('thunder/core/jit_ext.py')}",
        f"{MODULES[1]}: patched, sha256 {sha[EAGER]} (the base's), {installed_file(EAGER)}",
        f"{LAZY_MODULE}: not imported yet, sha256 {sha[LAZY]} (the base's), {installed_file(LAZY)}",
    ]


# The fast run takes the lazy file of each matrix (I8 at its hardest: a file not imported yet decides for all);
# the eager one is the slow run's
ONE_FAST = [pytest.param(p, marks=pytest.mark.slow) if p == EAGER else p for p in OTHERS]


@pytest.fixture(scope="module", params=ONE_FAST)
def edited_copy(request, tmp_path_factory):
    """(edited file, a copy of thunder with its dist-info whose file ``request.param`` was edited in place)."""
    tree = copy_thunder(tmp_path_factory.mktemp("edited"))
    edited = tree / request.param
    lines = edited.read_text().splitlines(keepends=True)
    edited.write_text("".join([lines[0], "# edited locally\n", *lines[1:]]))
    return edited, tree


def test_an_edited_file_other_than_jit_ext_leaves_every_file_stock(scratch, edited_copy):
    edited, tree = edited_copy
    env = {"THUNDER_OVERLAY_PATCHES": str(scratch), "PYTHONPATH": str(tree)}
    out = none_patched(run_probe(env))
    reason = out["status"]["reason"]
    assert reason.startswith(f"{edited} (") and "THUNDER_OVERLAY_BASE=" in reason
    told = "the installed file was edited locally" if installed_form() == "wheel (" else "which is no known base"
    assert told in reason
    (listed,) = [f for f in out["status"]["files"] if f["path"] == str(edited)]
    assert not listed["matches_base"] and all(f["matches_base"] for f in out["status"]["files"] if f is not listed)
    assert_strict_raises(env, told)


@pytest.mark.parametrize("broken", ONE_FAST)
def test_a_hunk_that_fails_in_one_file_patches_no_file(scratch_broken, broken):
    env = {"THUNDER_OVERLAY_PATCHES": str(scratch_broken[broken])}
    out = none_patched(run_probe(env))
    reason = out["status"]["reason"]
    assert reason.startswith(f"PatchApplyError: {scratch_broken[broken]}/{installed_base().name}/"
                             f"{scratch_series.PATCH_NAME}: hunk #1 does not apply at line ")
    assert "# a line this thunder does not have', found " in reason
    assert all(f["matches_base"] for f in out["status"]["files"]), "the bytes are the base's: the series is at fault"
    assert_strict_raises(env, "PatchApplyError: ")


@pytest.mark.slow
def test_a_target_imported_before_the_finder_patches_no_later_one(scratch):
    # The start-up hook runs only after `import thunder` (a .pth processed late, as site.addsitedir does);
    # the lazy module is the first target the finder sees, and jit_ext and interpreter run stock already.
    late_hook = "import os, thunder\nos.environ['THUNDER_OVERLAY'] = '{}'\nfrom thunder_overlay import _startup\n_startup.activate()"
    env = {"THUNDER_OVERLAY_PATCHES": str(scratch)}
    out = none_patched(run_python(late_hook.format("1"), PROBE, JIT_STILL_WORKS, env=env, overlay="0"))
    reason = out["status"]["reason"]
    assert reason.startswith(f"thunder.core.jit_ext ({installed_file('thunder/core/jit_ext.py')}) was imported before "
                             "the overlay's finder was installed; ")
    strict = run_python(late_hook.format("strict"), f"import {LAZY_MODULE}", env=env, overlay="0")
    last = strict.stderr.strip().splitlines()[-1]
    assert strict.returncode != 0 and last.startswith(f"ImportError: thunder-overlay: importing {LAZY_MODULE} fails ")
    assert "was imported before the overlay's finder was installed" in last


@pytest.mark.slow
def test_enable_after_thunder_leaves_every_file_stock(scratch):
    code = f"""
        import json, os, sys, warnings
        import thunder
        os.environ["THUNDER_OVERLAY"] = "1"
        import thunder_overlay
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            thunder_overlay.enable()
        import {LAZY_MODULE}
        m = sys.modules[{LAZY_MODULE!r}]
        print(json.dumps({{"messages": [str(w.message) for w in caught], "lazy": {RUNS_PATCHED},
                          "status": thunder_overlay.status()}}))
    """
    out = last_json(run_python(code, env={"THUNDER_OVERLAY_PATCHES": str(scratch)}, overlay="0"))
    assert len(out["messages"]) == 1 and "was imported before the overlay was enabled" in out["messages"][0]
    assert out["lazy"] is False and out["status"]["state"] == "stock-imported"


@pytest.fixture(scope="module")
def shifted_tree(tmp_path_factory):
    """A source tree whose interpreter.py has 40 comment lines on top: no known base, its hunk at +40."""
    tree = copy_thunder(tmp_path_factory.mktemp("shifted"), dist_info=False)
    shifted = tree / EAGER
    shifted.write_text("# a line that upstream added later\n" * 40 + shifted.read_text())
    return tree


def test_opt_in_patches_every_file_of_an_unknown_base(scratch, shifted_tree):
    env = {"THUNDER_OVERLAY_PATCHES": str(scratch), "PYTHONPATH": str(shifted_tree)}
    refusal = none_patched(run_probe(env))
    assert f". {shifted_tree / EAGER} (source tree (" in refusal["status"]["reason"]
    assert "which is no known base" in refusal["status"]["reason"]

    out = last_json(run_probe(dict(env, THUNDER_OVERLAY_BASE=installed_base().name)))
    assert out["messages"] == [] and out["status"]["state"] == "patched-unverified"
    assert all(out["runs_patched"].values()) and out["marked"][MODULES[1]] and out["marked"][LAZY_MODULE]
    matches = {f["module"]: f["matches_base"] for f in out["status"]["files"]}
    assert [m for m, matches_base in matches.items() if not matches_base] == [MODULES[1]]


@pytest.mark.slow
def test_opt_in_patches_no_file_when_a_hunk_of_one_does_not_apply(scratch, tmp_path):
    tree = copy_thunder(tmp_path, dist_info=False)
    lazy = tree / LAZY
    lines = lazy.read_text().splitlines(keepends=True)
    lazy.write_text("".join([*lines[:-1], lines[-1].rstrip("\n") + "  # changed upstream\n"]))
    env = {"THUNDER_OVERLAY_PATCHES": str(scratch), "PYTHONPATH": str(tree), "THUNDER_OVERLAY_BASE": installed_base().name}
    out = none_patched(run_probe(env))
    reason = out["status"]["reason"]
    assert reason.startswith(f"THUNDER_OVERLAY_BASE={installed_base().name}: the {installed_base().name} series does not "
                             f"apply with exact context to {lazy} (sha256 ")
    assert_strict_raises(env, "does not apply with exact context")


@pytest.mark.slow
def test_a_changed_file_of_the_series_invalidates_the_cache_entry(scratch, tmp_path):
    tree = copy_thunder(tmp_path / "tree", dist_info=False)
    env = {"THUNDER_OVERLAY_PATCHES": str(scratch), "PYTHONPATH": str(tree), "THUNDER_OVERLAY_CACHE_DIR": str(tmp_path / "c"),
           "THUNDER_OVERLAY_BASE": installed_base().name}
    first = last_json(run_probe(env))["status"]
    entry = first["bytecode_cache"].removeprefix("written: ")
    assert last_json(run_probe(env))["status"]["bytecode_cache"] == f"hit: {entry}"
    lazy = tree / LAZY
    lazy.write_text("# one more line on top\n" + lazy.read_text())  # the hunk still applies, at +1
    again = last_json(run_probe(env))
    assert again["status"]["bytecode_cache"] == f"written: {entry} (replaced an entry that was not used: its key differs in files)"
    assert all(again["runs_patched"].values()) and json.dumps(again["status"]["files"]) != json.dumps(first["files"])
