"""bench/compare.py ends with one PASS/FAIL line naming the thresholds (checked on a report rebuilt from
pytest-benchmark JSON files, --report-only: no benchmark runs here)."""

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
                    "(median overlay/stock median ratio: compile <= 1.03, exec <= 1.02)")


def test_failed_run_ends_with_fail(tmp_path):
    write_pairs(tmp_path, {"seed946/exec/cpu-torch": [(1.0, 1.0)]})
    runs = json.loads((tmp_path / "runs.json").read_text())
    runs[1]["rc"] = 1
    (tmp_path / "runs.json").write_text(json.dumps(runs))
    rc, last = verdict(tmp_path)
    assert rc == 2 and last.startswith("FAIL: ") and last.endswith("; runs failed or nothing compared")
    assert "compile <= 1.03, exec <= 1.02" in last
