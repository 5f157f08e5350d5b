"""Version matrix: every supported thunder release against the overlay, in one torch environment.

    python tools/matrix.py [--releases 0.2.1 0.2.3] [--no-tests | --test-releases 0.2.1] [--jobs 2] [--out tools/results]
    python tools/matrix.py --releases main@1e22aacb1 --thunder-git ~/src/lightning-thunder

For each release, ``pip install --no-deps --target tools/.releases/X lightning-thunder==X`` (once); for
``main@REV``, the ``thunder`` folder of REV from a lightning-thunder git checkout (``git archive``, once,
under the ignored tools/.releases: never into the project). Then with ``PYTHONPATH`` pointing there: ``thunder-overlay status`` (is the series applied?),
``thunder-overlay verify`` (the reproducers, stock and overlay) and the overlay's own tests. Prints a
release x check table and writes it as JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from datetime import date
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
RELEASES_DIR = REPO / "tools" / ".releases"
sys.path.insert(0, str(REPO / "overlay"))
from thunder_overlay import manifest  # noqa: E402


def install(release: str, thunder_git: Path | None = None) -> Path:
    target = RELEASES_DIR / release
    if (target / "thunder" / "core" / "jit_ext.py").is_file():
        return target
    if release.startswith("main@"):
        if thunder_git is None:
            raise SystemExit(f"{release} is a commit of upstream main: pass --thunder-git CHECKOUT")
        target.mkdir(parents=True, exist_ok=True)
        archive = subprocess.run(["git", "-C", str(thunder_git), "archive", release.partition("@")[2], "thunder"],
                                 capture_output=True, check=True)
        subprocess.run(["tar", "-x", "-C", str(target)], input=archive.stdout, check=True)
    else:
        subprocess.run(
            [sys.executable, "-m", "pip", "install", "-q", "--disable-pip-version-check", "--no-deps",
             "--target", str(target), f"lightning-thunder=={release}"],
            check=True,
        )
    return target


def run(cmd: list[str], target: Path, timeout: int = 3600) -> tuple[int, str]:
    # the release first; a PYTHONPATH already set (a worktree's overlay/, say) stays behind it
    pythonpath = os.pathsep.join(filter(None, [str(target), os.environ.get("PYTHONPATH")]))
    env = dict(os.environ, PYTHONPATH=pythonpath, PYTHONWARNINGS="ignore")
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout, cwd=REPO)
    return proc.returncode, proc.stdout + proc.stderr


def summary_line(output: str, prefix: str) -> str:
    lines = [line for line in output.splitlines() if line.strip()]
    return next((line.strip("= ") for line in reversed(lines) if prefix in line), lines[-1] if lines else "")


def failed_tests(output: str) -> list[str]:
    """The short test summary's FAILED and ERROR lines: which tests, and the first line of why."""
    return [line for line in output.splitlines() if line.startswith(("FAILED ", "ERROR "))]


def check_release(release: str, with_tests: bool, jobs: int = 0, thunder_git: Path | None = None) -> dict:
    start = time.perf_counter()
    target = install(release, thunder_git)
    bindir = Path(sys.executable).parent
    row = {"release": release}
    code, out = run([str(bindir / "thunder-overlay"), "status"], target)
    row["applied"] = "patched" if code == 0 and out.lstrip().startswith("thunder-overlay: patched\n") else "NO: " + summary_line(out, "reason")
    code, out = run([str(bindir / "thunder-overlay"), "verify"], target)
    row["reproducers"] = ("ok: " if code == 0 else "FAIL: ") + summary_line(out, "programs pass")
    if with_tests:
        xdist = ["-n", str(jobs)] if jobs else []
        code, out = run([sys.executable, "-m", "pytest", "tests", "-q", "-rfE", "-p", "no:cacheprovider", *xdist], target)
        row["tests"] = ("ok: " if code == 0 else "FAIL: ") + summary_line(out, " in ")
        if code != 0:
            row["failed"] = failed_tests(out)
    row["seconds"] = round(time.perf_counter() - start)
    row["ok"] = row["applied"] == "patched" and all(row[k].startswith("ok") for k in ("reproducers", "tests") if k in row)
    return row


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--releases", nargs="*", default=manifest.supported_releases(manifest.load()))
    parser.add_argument("--no-tests", action="store_true", help="skip the overlay's own tests")
    parser.add_argument("--test-releases", nargs="*", default=None, help="run the overlay's tests only for these")
    parser.add_argument("--jobs", type=int, default=0, help="pytest-xdist workers for the overlay's tests")
    parser.add_argument("--out", type=Path, default=REPO / "tools" / "results")
    parser.add_argument("--thunder-git", type=Path, default=None,
                        help="a lightning-thunder git checkout, for releases main@REV (default: those are left out)")
    args = parser.parse_args(argv)

    releases = [r for r in args.releases if args.thunder_git or not r.startswith("main@")]
    if skipped := sorted(set(args.releases) - set(releases)):
        print(f"left out (no --thunder-git): {', '.join(skipped)}")
    rows = []
    args.out.mkdir(parents=True, exist_ok=True)
    for i, release in enumerate(releases, start=1):
        print(f"[{i}/{len(releases)}] thunder {release} ...", flush=True)
        with_tests = not args.no_tests and (args.test_releases is None or release in args.test_releases)
        rows.append(check_release(release, with_tests, args.jobs, args.thunder_git))
        print(f"    {rows[-1]}", flush=True)
        for line in rows[-1].get("failed", []):
            print(f"      {line}", flush=True)
        # Written after every release, so that a run stopped part-way keeps the rows it finished
        result = {"date": date.today().isoformat(), "python": sys.version.split()[0], "rows": rows}
        (args.out / "matrix.json").write_text(json.dumps(result, indent=2) + "\n")

    columns = ["release", "applied", "reproducers", "tests", "seconds"]
    print("\n| " + " | ".join(columns) + " |\n|" + "---|" * len(columns))
    for row in rows:
        print("| " + " | ".join(str(row.get(c, "not run")) for c in columns) + " |")
    return 0 if all(r["ok"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
