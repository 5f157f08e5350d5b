"""I5, never worse than stock: the naming differential over the corpus, stock and overlay in their own processes."""

import copy
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
    failures = {p: (c.error, c.lost, c.later) for p, c in comparisons.items() if c.violations}
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
