"""bench/compare.py's verdicts never call noise a result: a distribution-free 95% interval of the median
per-pair ratio decides, and below the pairs such an interval needs (6) a benchmark is INCONCLUSIVE unless
every ratio lies beyond the gross bound (--fail-above, 3.0). Checked on reports rebuilt from pytest-benchmark
JSON files (--report-only: no benchmark runs here) and on report.py's functions; also that warm-up runs come
first and each pair alternates its order."""

import json
import math
import random
import re
import shlex
import subprocess
import sys

import pytest

from conftest import REPO

sys.path.insert(0, str(REPO / "bench"))
import compare  # noqa: E402
import report  # noqa: E402


def write_pairs(out, medians: dict[str, list[tuple[float, float]]]):
    """medians: group -> [(stock, overlay) per pair], written as compare.py's pair files."""
    pairs = len(next(iter(medians.values())))
    runs = []
    for i in range(1, pairs + 1):
        for side, k in (("stock", 0), ("overlay", 1)):
            benchmarks = [{"fullname": f"bench/test_jit_bench.py::test[{group}]", "group": group,
                           "stats": {"median": values[i - 1][k]}} for group, values in medians.items()]
            (out / f"pair{i:02d}-{side}.json").write_text(json.dumps({"benchmarks": benchmarks}))
            runs.append({"pair": i, "side": side, "json": f"pair{i:02d}-{side}.json", "rc": 0, "seconds": 1.0})
    (out / "runs.json").write_text(json.dumps(runs))


def ratios_as_pairs(ratios):
    return [(1.0, r) for r in ratios]


def verdict(out, *options: str):
    proc = subprocess.run([sys.executable, str(REPO / "bench" / "compare.py"), "--report-only", "--out", str(out),
                           *options], capture_output=True, text=True, timeout=300)
    assert proc.stdout, proc.stderr
    return proc.returncode, proc.stdout.strip().splitlines()[-1]


def verdicts(out) -> dict[str, str]:
    rows = json.loads((out / "summary.json").read_text())["rows"]
    return {f"{r['workload']}/{r['measure']}/{r['target']}": r["verdict"] for r in rows}


def test_a_95_percent_interval_of_the_median_needs_6_pairs_and_covers_it():
    assert report.MIN_PAIRS == 6
    assert report.interval([1.0, 1.1, 0.9, 1.05, 0.95]) is None, "5 pairs: even the range covers only 94%"
    assert report.interval([0.9, 1.3, 1.0, 1.1, 0.95, 1.05]) == (0.9, 1.3), "6 pairs: the range, 97%"
    # 9 pairs: P(Binomial(9, 1/2) <= 1) = 10/512 < 2.5%, so the second smallest and second largest
    assert report.interval([float(x) for x in range(1, 10)]) == (2.0, 8.0)
    # Its coverage, seen: ratios whose true median is 1.0, heavy-tailed (exp of a Cauchy variable, clipped, as a
    # loaded machine's outliers) and skewed (a lognormal). 2000 runs each; 95% coverage allows 94% by chance.
    rng = random.Random(46)
    draws = {"cauchy": lambda: math.exp(max(-9.0, min(9.0, 0.05 * math.tan(math.pi * (rng.random() - 0.5))))),
             "lognormal": lambda: rng.lognormvariate(0, 0.2)}
    for name, draw in draws.items():
        for n in (6, 9, 15):
            hits = sum(low <= 1.0 <= high for low, high in (report.interval([draw() for _ in range(n)])
                                                               for _ in range(2000)))
            assert hits / 2000 >= 0.94, (name, n, hits)


@pytest.mark.parametrize("ratios", [
    [0.66, 0.70],            # an execution "PASS" of an unchanged program, seen on a loaded machine
    [1.25, 1.18],            # chain-100 compile, two pairs
    [0.30, 2.30],            # the spread CI machines showed
    [2.0, 1.0, 1.12],        # one cold pair and two more: still under 6
    [1.50, 1.60, 1.70, 1.55, 1.65],  # clearly slower, but 5 pairs: no interval, and under the 3.0 bound
], ids=["fast-noise", "chain-noise", "ci-spread", "three-pairs", "five-slower"])
def test_fewer_pairs_than_an_interval_needs_is_inconclusive_never_pass_or_fail(tmp_path, ratios):
    write_pairs(tmp_path, {"seed946/exec/cpu-torch": ratios_as_pairs(ratios)})
    rc, last = verdict(tmp_path)
    assert rc == 3 and last.startswith("INCONCLUSIVE: 0 PASS, 0 FAIL, 1 INCONCLUSIVE of 1 compared benchmarks"), last
    summary = (tmp_path / "summary.txt").read_text()
    assert f"{len(ratios)} pair" in summary and "a 95% interval needs 6" in summary
    assert "~[" in summary, "a range, not called an interval"


def test_fewer_pairs_fail_only_when_every_ratio_is_beyond_the_bound(tmp_path):
    write_pairs(tmp_path, {
        "chain-100/compile/cpu-torch": ratios_as_pairs([3.4, 4.1]),  # a gross slowdown: both pairs above 3.0
        "chain-1000/compile/cpu-torch": ratios_as_pairs([2.9, 4.0]),  # one pair under the bound
        "seed946/exec/cpu-torch": ratios_as_pairs([1.0, 1.01]),
    })
    rc, last = verdict(tmp_path)
    assert rc == 1 and last.startswith("FAIL: 0 PASS, 1 FAIL, 2 INCONCLUSIVE of 3 compared benchmarks"), last
    assert verdicts(tmp_path) == {"chain-100/compile/cpu-torch": "FAIL", "chain-1000/compile/cpu-torch": "INCONCLUSIVE",
                                  "seed946/exec/cpu-torch": "INCONCLUSIVE"}
    assert "every ratio above 3" in (tmp_path / "summary.txt").read_text()
    # the caller sets the bound
    rc, last = verdict(tmp_path, "--fail-above", "5")
    assert rc == 3 and last.startswith("INCONCLUSIVE: 0 PASS, 0 FAIL, 3 INCONCLUSIVE"), last
    assert last.endswith("under 6 pairs FAIL only when every ratio > 5)")


@pytest.mark.parametrize("ratios, code, counts", [
    ([1.00, 1.01, 0.99, 1.00, 1.02, 0.98], 0, "PASS: 1 PASS, 0 FAIL, 0 INCONCLUSIVE"),
    ([1.10, 1.12, 1.08, 1.11, 1.09, 1.13], 1, "FAIL: 0 PASS, 1 FAIL, 0 INCONCLUSIVE"),
    ([0.95, 1.07, 1.01, 0.97, 1.05, 1.00, 1.03], 3, "INCONCLUSIVE: 0 PASS, 0 FAIL, 1 INCONCLUSIVE"),
], ids=["within", "slower", "spans"])
def test_six_pairs_or_more_decide_on_the_interval(tmp_path, ratios, code, counts):
    write_pairs(tmp_path, {"seed946/exec/cpu-torch": ratios_as_pairs(ratios)})
    rc, last = verdict(tmp_path, "--exec-threshold", "1.02")
    assert rc == code and last == (f"{counts} of 1 compared benchmarks (95% interval of the median overlay/stock "
                                   "median ratio: compile <= 1.03, exec <= 1.02; under 6 pairs FAIL only when "
                                   "every ratio > 3)"), last
    summary = (tmp_path / "summary.txt").read_text()
    assert " ".join(f"{r:.3f}" for r in ratios) in summary, "every per-pair ratio is in the report"
    if code == 3:
        assert re.search(r"INCONCLUSIVE \(about \d+ pairs would decide\)", summary), summary


def test_compile_and_exec_benchmarks_get_their_own_thresholds(tmp_path):
    same = [1.04, 1.05, 1.045, 1.05, 1.04, 1.045]
    write_pairs(tmp_path, {"seed946/compile/cpu-torch": ratios_as_pairs(same),
                           "seed946/exec/cpu-torch": ratios_as_pairs(same)})
    rc, _ = verdict(tmp_path, "--compile-threshold", "1.06", "--exec-threshold", "1.02")
    assert rc == 1 and verdicts(tmp_path) == {"seed946/compile/cpu-torch": "PASS", "seed946/exec/cpu-torch": "FAIL"}
    counts = json.loads((tmp_path / "summary.json").read_text())["counts"]
    assert counts == {"PASS": 1, "FAIL": 1, "INCONCLUSIVE": 0}


def _command_options(text: str, prefix: str) -> list[str]:
    """The options of the first command in ``text`` that starts with ``prefix`` (backslash continuations joined,
    --out dropped: it only names the folder)."""
    line = next(x for x in text.replace("\\\n", " ").splitlines() if x.strip().startswith(prefix))
    words = shlex.split(line.strip().split("#")[0].split("||")[0])[len(shlex.split(prefix)):]
    while "--out" in words:
        i = words.index("--out")
        del words[i:i + 2]
    return words


def test_quick_as_documented_gives_the_verdicts_ci_gets(tmp_path):
    documented = _command_options((REPO / "bench" / "README.md").read_text(), "python bench/compare.py --quick")
    ci = _command_options((REPO / ".ci" / "run").read_text(), ".venv/bin/python bench/compare.py")
    assert "--quick" in ci
    rng = random.Random(3)
    data = {f"w{i}/{'compile' if i % 2 else 'exec'}/cpu-torch": ratios_as_pairs([rng.uniform(0.3, 4.5) for _ in "ab"])
            for i in range(40)}
    write_pairs(tmp_path, data)
    seen = []
    for options in (["--quick", *documented], ci):
        verdict(tmp_path, *options)
        seen.append(verdicts(tmp_path))
    assert seen[0] == seen[1]
    assert set(seen[0].values()) == {"FAIL", "INCONCLUSIVE"}, "the data reaches both verdicts 2 pairs can give"


def test_each_run_draws_its_ratios_against_the_thresholds(tmp_path):
    write_pairs(tmp_path, {"seed946/compile/cpu-torch": ratios_as_pairs([1.0, 1.01, 0.99, 1.0, 1.02, 0.98]),
                           "seed946/exec/cpu-torch": ratios_as_pairs([1.2, 1.3, 1.25, 1.2, 1.3, 1.22])})
    verdict(tmp_path)
    png = (tmp_path / "ratios.png").read_bytes()
    assert png.startswith(b"\x89PNG\r\n\x1a\n") and len(png) > 5000
    assert f"wrote {tmp_path / 'ratios.png'}" in (tmp_path / "summary.txt").read_text()


def test_warm_up_runs_come_first_and_each_pair_alternates_its_order():
    runs = compare.schedule(pairs=4, warmup=1)
    assert runs[:2] == [("warmup", 1, "stock", "0"), ("warmup", 1, "overlay", "1")]
    firsts = [side for kind, i, side, _ in runs[2:] if kind == "pair"][::2]
    assert firsts == ["stock", "overlay", "stock", "overlay"]


def test_null_runs_stock_on_both_sides():
    args = compare.parse_args(["--quick", "--null"])
    assert {compare.side_env(side, flag, args)["THUNDER_OVERLAY"] for side, flag in compare.SIDES} == {"0"}
    args = compare.parse_args(["--quick"])
    assert [compare.side_env(side, flag, args)["THUNDER_OVERLAY"] for side, flag in compare.SIDES] == ["0", "1"]


def test_failed_run_ends_with_fail(tmp_path):
    write_pairs(tmp_path, {"seed946/exec/cpu-torch": [(1.0, 1.0)]})
    runs = json.loads((tmp_path / "runs.json").read_text())
    runs[1]["rc"] = 1
    (tmp_path / "runs.json").write_text(json.dumps(runs))
    rc, last = verdict(tmp_path)
    assert rc == 2 and last.startswith("FAIL: ") and last.endswith("; runs failed or nothing compared")
    assert "compile <= 1.03, exec <= 1.02" in last
