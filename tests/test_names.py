"""I5, never worse than stock: the naming differential over the corpus, stock and overlay in their own processes."""

import copy
import io
import os
import subprocess
import sys

import pytest

from thunder_overlay import names

from conftest import requires_overlay

pytestmark = requires_overlay


@pytest.fixture(scope="module")
def corpus():
    """Both sides' records of every corpus program, and the comparison of each."""
    targets = names.corpus_targets()
    stock, thunder_locals, overlay = names.run_both(targets)
    comparisons = {t.rpartition(":")[2]: names.compare(t, stock[t], overlay[t], thunder_locals) for t in targets}
    return stock, overlay, comparisons


def by_name(records: dict, program: str) -> dict:
    return records[f"{names.CORPUS}:{program}"]


def computed_names(record: dict) -> set[str]:
    return {n for trace in record["traces"] for depth, _, outs, _ in trace["symbols"] if depth == 0 for n in outs}


@pytest.mark.slow
def test_overlay_side_ran_the_series_and_stock_side_the_order_patch_alone(corpus):
    stock, overlay, _ = corpus
    assert {r["state"] for r in overlay.values()} == {"patched"}
    assert all(len(r["patches"]) > 1 for r in overlay.values())
    # Stock with the module-order patch alone: stock's own order of module.parameters() depends on the hash seed
    assert {r["state"] for r in stock.values()} == {"patched"}
    assert all(len(r["patches"]) == 1 and r["patches"][0].endswith(names.ORDER_PATCH) for r in stock.values())


@pytest.mark.slow
def test_no_value_stock_names_is_lost(corpus):
    _, _, comparisons = corpus
    failures = {p: (c.error, c.lost, c.later) for p, c in comparisons.items()
                if c.lost or c.later or (c.error and not c.both_failed)}  # I9 and I10 have their own test
    assert not failures
    assert sum(c.stock_named for c in comparisons.values()) > 100, "the corpus names values at all"


@pytest.mark.slow
def test_only_the_programs_of_the_fixed_bugs_fail_stock(corpus):
    stock, overlay, _ = corpus
    assert all(r["ok"] for r in overlay.values()), [r.get("error") for r in overlay.values() if not r["ok"]]
    failed = sorted(t.rpartition(":")[2] for t, r in stock.items() if not r["ok"])
    assert failed == ["autocast_chain", "names_the_prologue_gives", "names_thunder_gives_with_grad"]
    assert "Expected a.dtype=thunder.dtypes.float32" in by_name(stock, "autocast_chain")["error"]
    assert "Trying to add the name C0 to a trace" in by_name(stock, "names_thunder_gives_with_grad")["error"]


@pytest.mark.slow
@pytest.mark.parametrize("program, name", [("sequential", "y"), ("sequential_after_loop", "final")])
def test_module_results_the_caller_binds_keep_their_names_as_in_stock(corpus, program, name):
    stock, overlay, comparisons = corpus
    assert name in computed_names(by_name(stock, program))
    assert name in computed_names(by_name(overlay, program))
    assert comparisons[program].kept == comparisons[program].stock_named


@pytest.mark.slow
def test_helper_parameter_naming_a_rebound_variable_is_kept(corpus):
    stock, overlay, _ = corpus
    # prog binds `w` to u - u while the input holds `w`; stock then names the value after helper's `q`
    assert "q" in computed_names(by_name(stock, "helper_rebinds_input"))
    assert "q" in computed_names(by_name(overlay, "helper_rebinds_input"))


@pytest.mark.slow
def test_thunder_locals_are_removed_and_the_value_counted(corpus):
    stock, overlay, comparisons = corpus
    assert "result" in computed_names(by_name(stock, "autocast_seed"))
    assert "result" not in computed_names(by_name(overlay, "autocast_seed"))
    assert [s for s, _ in comparisons["autocast_seed"].internal] == ["result"]


@pytest.mark.slow
def test_models_keep_every_name_stock_gives(corpus):
    _, _, comparisons = corpus
    for program in ("llama2_like", "gpt_neox_like", "pythia_14m", "nanogpt", "thunderfx_program"):
        c = comparisons[program]
        assert c.stock_named > 5 and not c.error and c.kept + len(c.earlier) == c.stock_named, program


@pytest.mark.slow
def test_comparison_reports_a_value_the_overlay_leaves_generated(corpus):
    stock, overlay, _ = corpus
    target = f"{names.CORPUS}:sequential"
    broken = copy.deepcopy(overlay[target])
    trace = broken["traces"][0]
    # rename the overlay's `y` to a generated name everywhere, as a patch that lost it would
    rename = {"y": "t99"}
    trace["symbols"] = [[d, s, [rename.get(n, n) for n in outs], [rename.get(n, n) for n in args]]
                        for d, s, outs, args in trace["symbols"]]
    trace["bindings"]["t99"] = trace["bindings"].pop("y")
    result = names.compare(target, stock[target], broken, set())
    assert result.lost == [("y", "t99")] and result.violations == 1


@pytest.mark.slow
def test_no_grad_program_keeps_its_generated_looking_names(corpus):
    # 0.2.1 and 0.2.2 copy every output under no_grad and the copies lose the weak-name flag
    stock, overlay, comparisons = corpus
    assert "t1" in computed_names(by_name(stock, "no_grad_inference"))
    assert {"t1", "t2"} <= computed_names(by_name(overlay, "no_grad_inference"))
    assert comparisons["no_grad_inference"].lost == []


@pytest.mark.slow
def test_both_sides_checked_i9_and_i10_for_every_jit(corpus):
    stock, overlay, _ = corpus
    for side in (stock, overlay):
        for record in side.values():
            for trace in record["traces"] if record["ok"] else ():
                assert isinstance(trace["i9"], list) and isinstance(trace["i10"], list), record["target"]


@pytest.mark.slow
def test_the_overlay_breaks_neither_i9_nor_i10_on_the_corpus(corpus):
    _, _, comparisons = corpus
    assert {p: c.i9 + c.i10 for p, c in comparisons.items() if c.i9 or c.i10} == {}


@pytest.mark.slow
@pytest.mark.parametrize("program, invariant", [
    ("rebinds_weight", "i9"), ("rebinds_weight_with_grad", "i9"), ("rebinds_buffer", "i9"),
    ("wraps_swapped", "i10"), ("wraps_fewer", "i10"), ("decorator_reorders", "i10"),
])
def test_stock_and_the_overlay_hold_where_the_series_v4_broke_them(corpus, program, invariant):
    # I9: a name rebound to a module's parameter or buffer after use names it in the prologue alone; I10: a
    # functools.wraps wrapper's inputs named after the wrapped function's parameters, in another order
    _, _, comparisons = corpus
    c = comparisons[program]
    assert getattr(c, f"stock_{invariant}") == [], (c.stock_i9, c.stock_i10)
    assert getattr(c, invariant) == [], (c.i9, c.i10)


@pytest.mark.slow
def test_stock_s_names_after_thunder_locals_break_i10_by_the_eager_run(corpus):
    # stock names autocast's inputs after the matmul rule's locals (a, b); the program's own `b` is the first input.
    # The eager run of the program (outside thunder) is the truth, so stock's false names are caught, and the
    # overlay's names, from the traced function's frame, are true
    _, _, comparisons = corpus
    c = comparisons["autocast_rule_names"]
    assert any(v.startswith("I10: input 0 is named 'a'") for v in c.stock_i10), c.stock_i10
    assert c.i10 == [] and c.violations == 0


@pytest.mark.slow
def test_a_program_that_cannot_run_eagerly_is_reported_unchecked_and_gains_nothing(corpus):
    # the #946 round trip jits a trace's python_callable, which runs only inside thunder: no truth for I10
    _, _, comparisons = corpus
    c = comparisons["seed_946_round_trip"]
    assert c.unchecked and c.unchecked[0].startswith("I10 unchecked: the program fails when run eagerly")
    assert c.gained == [] and c.violations == 0


@pytest.mark.slow
def test_a_value_reached_through_a_list_keeps_the_program_s_name(corpus):
    # the tanh is the program's `t`; stock names it `a` (thunder.torch.size's parameter), the series v4 `t0`
    stock, overlay, _ = corpus
    assert "a" in computed_names(by_name(stock, "through_a_list"))
    assert "t" in computed_names(by_name(overlay, "through_a_list"))


def test_i9_and_i10_are_the_overlay_s_violations_and_stock_s_are_reported():
    def record(i9=(), i10=()):
        symbols = [[0, "ltorch.tanh", ["y"], ["x"]]]
        trace = {"args": ["x"], "symbols": symbols, "bindings": {"x": ["x"], "y": ["y"]}}
        return {"ok": True, "traces": [{**trace, "i9": list(i9), "i10": list(i10)}]}

    shared = "I9: prologue output -> computation argument (first traces), position 0: 'x' != 't0'"
    bound = "I10: 'x' in the computation trace names a value the program bound to 'y' only"
    c = names.compare("mod:p", record(i10=[bound]), record(i9=[shared]), set())
    assert (c.i9, c.i10, c.stock_i9, c.stock_i10) == ([shared], [], [], [bound])
    assert c.violations == 1 and c.lost == [] and c.kept == 2
    assert c.as_dict()["i9"] == [shared] and c.as_dict()["stock_i10"] == [bound]
    out = io.StringIO()
    names.print_table([c], out)
    table = out.getvalue()
    header, _, row = table.splitlines()[:3]
    assert header.split()[:7] == ["program", "stock", "overlay", "lost", "I9", "I10", "internal"]
    assert row.split()[:7] == ["p", "2", "2", "0", "1", "0", "0"]
    assert "I9 prologue output -> computation argument" in row and "stock 0 I9, 1 I10" in row
    assert "; 0 lost, 1 I9, 0 I10 (" in table and "\nstock: 0 I9, 1 I10 (reported, not failures)" in table
    # stock's violations alone fail nothing
    assert names.compare("mod:p", record(i10=[bound]), record(), set()).violations == 0
    # a side that did not record the program's bindings checked no I10: an error, not a pass
    unrecorded = record()
    unrecorded["traces"][0]["i10"] = None
    c = names.compare("mod:p", record(), unrecorded, set())
    assert "I10 unchecked" in c.error and c.violations == 1


def test_a_counted_out_name_is_not_taken_for_a_thunder_local():
    def record(out_name):
        symbols = [[0, "ltorch.linear", [out_name], ["x", "w"]], [0, "ltorch.tanh", ["y"], [out_name]]]
        return {"ok": True, "traces": [{"args": ["x", "w"], "symbols": symbols, "bindings": {"y": ["y"]}}]}

    # stock's t10 where the overlay has t9: thunder's code having a local named t10 is a coincidence
    assert names.compare("p", record("t10"), record("t9"), {"t10", "result"}).internal == []
    # stock's `result` where the overlay has t9: a leaked local of thunder's code, removed
    assert names.compare("p", record("result"), record("t9"), {"t10", "result"}).internal == [("result", "t9")]


@pytest.mark.slow
def test_names_command_on_a_users_file(tmp_path):
    program = tmp_path / "my_model.py"
    program.write_text(
        "import torch\n"
        "block = torch.nn.Sequential(torch.nn.Linear(3, 3), torch.nn.Tanh())\n"
        "def forward(x):\n"
        "    hidden = block(x)\n"
        "    return hidden * 2\n"
        "def forward_inputs():\n"
        "    return (torch.randn(2, 3),)\n"
    )
    proc = subprocess.run([sys.executable, "-m", "thunder_overlay.cli", "names", "--traces", f"{program}:forward"],
                          capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "hidden = linear" not in proc.stdout  # hidden is Tanh's output
    assert "hidden = tanh" in proc.stdout
    assert any(line.split()[:1] == ["forward"] for line in proc.stdout.splitlines()), proc.stdout
    assert "; 0 lost" in proc.stdout


@pytest.mark.slow
def test_names_command_refuses_a_target_without_inputs(tmp_path):
    (tmp_path / "bare.py").write_text("def f(x):\n    return x\n")
    proc = subprocess.run([sys.executable, "-m", "thunder_overlay.cli", "names", f"{tmp_path / 'bare.py'}:f"],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 2, "a malformed target is a usage error, refused before any process starts"
    assert "defines neither f_inputs() nor inputs()" in proc.stderr and proc.stdout == ""


@pytest.mark.slow
def test_names_command_does_not_depend_on_the_hash_seed_of_its_two_sides(tmp_path):
    # Stock thunder orders a module's parameters by hash seed inside the jit: with a random seed per side
    # the two sides would jit two different programs (symbols over parameters of other shapes, in another order).
    program = tmp_path / "first_parameter.py"
    program.write_text(
        "import torch\n"
        "n = torch.nn.Sequential(torch.nn.Linear(2, 2), torch.nn.LayerNorm(2), torch.nn.Linear(2, 2))\n"
        "def f(x):\n"
        "    scaled = [p * 2 for p in n.parameters()]\n"
        "    return x + scaled[0].sum() * scaled[-1]\n"
        "def g(x):\n"
        "    weights = [p.sum() for p in n.parameters()]\n"
        "    return x * weights[0] + weights[1]\n"
        "def inputs():\n"
        "    return (torch.randn(2),)\n"
    )
    env = dict(os.environ, PYTHONHASHSEED="random")
    proc = subprocess.run([sys.executable, "-m", "thunder_overlay.cli", "names", f"{program}:f", f"{program}:g"],
                          capture_output=True, text=True, timeout=600, cwd=tmp_path, env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "not one program" not in proc.stdout and "; 0 lost" in proc.stdout
