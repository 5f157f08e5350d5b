"""Version matrix: thunder releases x torch environments against the overlay.

    python tools/matrix.py [--releases 0.2.1 0.2.3] [--no-tests | --test-releases 0.2.1] [--jobs 2] [--out tools/results]
    python tools/matrix.py --releases main@1e22aacb1 --thunder-git ~/src/lightning-thunder
    python tools/matrix.py --releases 0.2.6 main@1e22aacb1 --thunder-git DIR --names \
        --pythons /work/envs/torch2.10-py3.12/bin/python /work/envs/torch2.12-py3.11/bin/python

The torch axis: ``--pythons`` names interpreters of environments that each hold one torch (and the dev
requirements, e.g. ``pip install -r requirements-dev.txt torch==2.10.0``); every check runs with that
interpreter, and this repository's ``overlay/`` goes on PYTHONPATH after the release, so the overlay under test
is this checkout's whatever the environment has installed. Default: this interpreter only.

For each release, ``pip install --no-deps --target tools/.releases/X lightning-thunder==X`` (once); for
``main@REV``, the ``thunder`` folder of REV from a lightning-thunder git checkout (``git archive``, once,
under the ignored tools/.releases: never into the project). Then with ``PYTHONPATH`` pointing there: ``thunder-overlay status`` (is the series applied?),
``thunder-overlay verify`` (the reproducers, stock and overlay), the overlay's own tests and, with
``--names``, ``thunder-overlay names`` (the name corpus, stock and overlay: values named worse than stock).
Prints a torch x release x check table and writes it as JSON (matrix.json; matrix-torch.json with --pythons).
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
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


TIMEOUT = 3600  # seconds per check; --timeout


def run(cmd: list[str], target: Path) -> tuple[int, str]:
    """A check's exit code and output; a check past TIMEOUT seconds is a failed check that says so."""
    # the release first, then this checkout's overlay (an environment may hold another checkout's
    # editable install); a PYTHONPATH already set stays behind them
    pythonpath = os.pathsep.join(filter(None, [str(target), str(REPO / "overlay"), os.environ.get("PYTHONPATH")]))
    env = dict(os.environ, PYTHONPATH=pythonpath, PYTHONWARNINGS="ignore")
    try:
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=TIMEOUT, cwd=REPO)
    except subprocess.TimeoutExpired:
        return 124, f"timed out after {TIMEOUT} s"
    return proc.returncode, proc.stdout + proc.stderr


def summary_line(output: str, prefix: str) -> str:
    lines = [line for line in output.splitlines() if line.strip()]
    return next((line.strip("= ") for line in reversed(lines) if prefix in line), lines[-1] if lines else "")


def failed_tests(output: str) -> list[str]:
    """The short test summary's FAILED and ERROR lines: which tests, and the first line of why."""
    return [line for line in output.splitlines() if line.startswith(("FAILED ", "ERROR "))]


def probe_torch(python: str) -> str:
    proc = subprocess.run([python, "-c", "import torch; print(torch.__version__)"], capture_output=True, text=True)
    return proc.stdout.strip() if proc.returncode == 0 else f"? ({proc.stderr.strip()[-200:]})"


CLI = "import sys; from thunder_overlay.cli import main; sys.exit(main())"


def check_release(release: str, with_tests: bool, jobs: int = 0, thunder_git: Path | None = None,
                  python: str = sys.executable, with_names: bool = False, pytest_args: tuple = ()) -> dict:
    start = time.perf_counter()
    target = install(release, thunder_git)
    cli = [python, "-c", CLI]
    row = {"release": release, "python": python}
    code, out = run([*cli, "status"], target)
    row["applied"] = "patched" if code == 0 and out.lstrip().startswith("thunder-overlay: patched\n") else "NO: " + summary_line(out, "reason")
    code, out = run([*cli, "verify"], target)
    row["reproducers"] = ("ok: " if code == 0 else "FAIL: ") + summary_line(out, "programs pass")
    if with_tests:
        xdist = ["-n", str(jobs), "--dist", "loadfile"] if jobs else []
        code, out = run([python, "-m", "pytest", "tests", "-q", "-rfE", "-p", "no:cacheprovider", *xdist, *pytest_args],
                        target)
        row["tests"] = ("ok: " if code == 0 else "FAIL: ") + summary_line(out, " in ")
        if code != 0:
            row["failed"] = failed_tests(out)
    if with_names:
        code, out = run([*cli, "names"], target)
        row["names"] = ("ok: " if code == 0 else "FAIL: ") + summary_line(out, " lost")
        if code != 0:  # the programs that failed a side, lost a name or could not be compared
            row["failed"] = row.get("failed", []) + [
                line.strip() for line in out.splitlines() if "ERROR:" in line or " LOST " in line or "note: " in line]
    row["seconds"] = round(time.perf_counter() - start)
    row["ok"] = row["applied"] == "patched" and all(
        row[k].startswith("ok") for k in ("reproducers", "tests", "names") if k in row)
    return row


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--releases", nargs="*", default=manifest.supported_releases(manifest.load()))
    parser.add_argument("--no-tests", action="store_true", help="skip the overlay's own tests")
    parser.add_argument("--test-releases", nargs="*", default=None, help="run the overlay's tests only for these")
    parser.add_argument("--jobs", type=int, default=0, help="pytest-xdist workers for the overlay's tests")
    parser.add_argument("--out", type=Path, default=REPO / "tools" / "results")
    parser.add_argument("--timeout", type=int, default=TIMEOUT, help="seconds per check (default %(default)s)")
    parser.add_argument("--pythons", nargs="+", default=[sys.executable], metavar="PYTHON",
                        help="the torch axis: one interpreter per torch environment (default: this one)")
    parser.add_argument("--names", action="store_true", help="also run `thunder-overlay names` (the name corpus)")
    parser.add_argument("--pytest-args", default="", help='extra arguments for the overlay\'s tests, e.g. "-m \'not slow\'"')
    parser.add_argument("--thunder-git", type=Path, default=None,
                        help="a lightning-thunder git checkout, for releases main@REV (default: those are left out)")
    args = parser.parse_args(argv)
    globals()["TIMEOUT"] = args.timeout

    releases = [r for r in args.releases if args.thunder_git or not r.startswith("main@")]
    if skipped := sorted(set(args.releases) - set(releases)):
        print(f"left out (no --thunder-git): {', '.join(skipped)}")
    rows = []
    args.out.mkdir(parents=True, exist_ok=True)
    torch_axis = args.pythons != [sys.executable]
    cells = [(python, release) for python in args.pythons for release in releases]
    torch_of = {python: probe_torch(python) for python in args.pythons}
    for i, (python, release) in enumerate(cells, start=1):
        print(f"[{i}/{len(cells)}] torch {torch_of[python]} ({python}), thunder {release} ...", flush=True)
        with_tests = not args.no_tests and (args.test_releases is None or release in args.test_releases)
        rows.append({"torch": torch_of[python],
                     **check_release(release, with_tests, args.jobs, args.thunder_git, python, args.names,
                                     tuple(shlex.split(args.pytest_args)))})
        print(f"    {rows[-1]}", flush=True)
        for line in rows[-1].get("failed", []):
            print(f"      {line}", flush=True)
        # Written after every release, so that a run stopped part-way keeps the rows it finished
        result = {"date": date.today().isoformat(), "python": sys.version.split()[0], "rows": rows}
        (args.out / ("matrix-torch.json" if torch_axis else "matrix.json")).write_text(json.dumps(result, indent=2) + "\n")

    columns = ["torch", "release", "applied", "reproducers", "tests", *(["names"] if args.names else []), "seconds"]
    print("\n| " + " | ".join(columns) + " |\n|" + "---|" * len(columns))
    for row in rows:
        print("| " + " | ".join(str(row.get(c, "not run")) for c in columns) + " |")
    return 0 if all(r["ok"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
