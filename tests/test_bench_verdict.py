"""bench/compare.py ends with one PASS/FAIL/INCONCLUSIVE line naming the thresholds, decided on the 95%
bootstrap interval of the median per-pair ratio (checked on reports rebuilt from pytest-benchmark JSON
files, --report-only: no benchmark runs here), and runs warm-up runs first and alternates each pair's order."""

import json
import subprocess
import sys

import pytest

from conftest import REPO


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


def verdict(out, *thresholds: str):
    proc = subprocess.run([sys.executable, str(REPO / "bench" / "compare.py"), "--report-only", "--out", str(out),
                           *thresholds], capture_output=True, text=True, timeout=300)
    return proc.returncode, proc.stdout.strip().splitlines()[-1]


@pytest.mark.parametrize(
    "exec_ratio, code, word", [(1.01, 0, "PASS"), (1.10, 1, "FAIL")], ids=["within", "slower"]
)
def test_last_line_is_the_verdict_with_the_thresholds(tmp_path, exec_ratio, code, word):
    write_pairs(tmp_path, {
        "seed946/compile/cpu-torch": [(1.0, 1.0), (2.0, 2.0)],
        "seed946/exec/cpu-torch": [(1.0, exec_ratio), (2.0, 2.0 * exec_ratio)],
    })
    rc, last = verdict(tmp_path, "--compile-threshold", "1.03", "--exec-threshold", "1.02")
    assert rc == code
    within = 2 if code == 0 else 1
    assert last == (f"{word}: {within} of 2 compared benchmarks within thresholds "
                    "(95% interval of the median overlay/stock median ratio: compile <= 1.03, exec <= 1.02)")


def test_an_interval_spanning_the_threshold_is_inconclusive_and_says_how_many_pairs_would_decide(tmp_path):
    # The median ratio is 1.01, under the threshold, but the pairs spread from 0.95 to 1.07: no verdict.
    ratios = [0.95, 1.07, 1.01, 0.97, 1.05]
    write_pairs(tmp_path, {"seed946/exec/cpu-torch": [(1.0, r) for r in ratios]})
    rc, last = verdict(tmp_path, "--exec-threshold", "1.02")
    assert rc == 3 and last.startswith("INCONCLUSIVE: 0 of 1 compared"), last
    summary = (tmp_path / "summary.txt").read_text()
    assert "INCONCLUSIVE (about " in summary and " pairs would decide)" in summary
    assert "0.950 1.070 1.010 0.970 1.050" in summary, "every per-pair ratio is in the report"


def test_one_cold_pair_does_not_decide_a_verdict(tmp_path):
    # What the first GPU run showed: one pair twice as fast on the overlay side because the stock side ran
    # first on a cold machine. The median of the ratios passed; the interval does not.
    write_pairs(tmp_path, {"seed946/compile/cpu-torch": [(2.0, 1.0), (1.0, 1.10), (1.0, 1.12)]})
    rc, last = verdict(tmp_path, "--compile-threshold", "1.03")
    assert rc in (1, 3) and not last.startswith("PASS"), last


def test_the_interval_is_a_bootstrap_of_the_median():
    sys.path.insert(0, str(REPO / "bench"))
    import report

    assert report.interval([1.0] * 5) == (1.0, 1.0)
    low, high = report.interval([0.9, 1.0, 1.1, 1.0, 0.95, 1.05, 1.0])
    assert 0.9 <= low < 1.0 < high <= 1.1
    assert report.interval([0.9, 1.0, 1.1]) == report.interval([0.9, 1.0, 1.1]), "seeded: a rebuilt report agrees"


def test_warm_up_runs_come_first_and_each_pair_alternates_its_order():
    sys.path.insert(0, str(REPO / "bench"))
    import compare

    runs = compare.schedule(pairs=4, warmup=1)
    assert runs[:2] == [("warmup", 1, "stock", "0"), ("warmup", 1, "overlay", "1")]
    firsts = [side for kind, i, side, _ in runs[2:] if kind == "pair"][::2]
    assert firsts == ["stock", "overlay", "stock", "overlay"]


def test_failed_run_ends_with_fail(tmp_path):
    write_pairs(tmp_path, {"seed946/exec/cpu-torch": [(1.0, 1.0)]})
    runs = json.loads((tmp_path / "runs.json").read_text())
    runs[1]["rc"] = 1
    (tmp_path / "runs.json").write_text(json.dumps(runs))
    rc, last = verdict(tmp_path)
    assert rc == 2 and last.startswith("FAIL: ") and last.endswith("; runs failed or nothing compared")
    assert "compile <= 1.03, exec <= 1.02" in last
