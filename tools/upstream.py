"""Prove that the tests the series adds to thunder's test modules test the fix, here and on upstream's tree.

    python tools/upstream.py installed [--pythonpath DIR] [--keep DIR]
    python tools/upstream.py git --thunder-git CHECKOUT [--rev main] [--series 0.2.6]

``installed``: copies the installed thunder's test modules that the series changes, applies the series'
test hunks, and runs the tests it adds against stock thunder (THUNDER_OVERLAY=0), then under the overlay
with the first 1, 2, ... patches of the series (a THUNDER_OVERLAY_PATCHES folder holding the shorter series,
its manifest listing the files of thunder those patches change).
``--keep DIR`` leaves the patched test modules there (for ``tools/gate.py --test-root DIR``).

``git``: in a temporary worktree of CHECKOUT at REV (never inside this project), ``git am`` applies the whole
series (no three-way merge), and at every commit of the series the checkout's pinned style tools (``ruff
format --check`` and ``ruff check`` from 0.2.4 on, ``black --check`` before; installed once into the user's
cache) check the files that commit changes, with the checkout's configuration. The added tests run against
the checkout's thunder at REV and after each commit (PYTHONPATH=worktree, overlay off), with the pinned torch
of this environment.

Both print one row per added test and one column per step. Every added test must fail on stock thunder,
pass once the patch that adds it is applied, and keep passing with each later patch. Exit status 0 when that
holds (and, for ``git``, ``git am`` and the style checks succeed), 1 when not, 2 on a usage or set-up error.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "overlay"))
from thunder_overlay import config, manifest  # noqa: E402
from thunder_overlay.patchset import Patch, read_series  # noqa: E402
from series import sha256_at  # noqa: E402

TEST_TIMEOUT_S = 1800


@dataclass
class Step:
    label: str  # "stock", "0001", "0001-0002", ...
    env: dict[str, str]


def added_tests(patches: list[Patch]) -> dict[str, list[str]]:
    """Per patch name, the test functions its diffs of thunder's test modules add."""
    added = {}
    for patch in patches:
        names = []
        for diff in patch.files:
            if diff.path.startswith("thunder/tests/"):
                for hunk in diff.hunks:
                    new = set(hunk.new_lines) - set(hunk.old_lines)
                    names += [m.group(1) for line in hunk.new_lines if line in new
                              for m in [re.match(r"def (test_\w+)\(", line)] if m]
        added[patch.name] = names
    return added


def test_paths(patches: list[Patch]) -> list[str]:
    return sorted({d.path for p in patches for d in p.files if d.path.startswith("thunder/tests/")})


def run_tests(test_dir: Path, names: list[str], env: dict[str, str], label: str) -> dict[str, str]:
    """Runs the named tests of the modules in test_dir; returns {test name: 'passed' | 'failed' | 'skipped'} (a
    parametrized test counts as passed only when every case passed)."""
    report = test_dir / f"report-{label}.xml"
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-c", str(test_dir / "pytest.ini"),
           "--rootdir", str(test_dir), f"--junitxml={report}", "-k", " or ".join(names),
           *sorted(str(p) for p in test_dir.glob("test_*.py"))]
    print(f"  [{label}] running {len(names)} tests", flush=True)
    proc = subprocess.run(cmd, cwd=test_dir, env=env, capture_output=True, text=True, timeout=TEST_TIMEOUT_S)
    if not report.is_file():
        raise SystemExit(f"pytest did not run ({label}), exit {proc.returncode}:\n{proc.stdout[-3000:]}{proc.stderr[-2000:]}")
    outcomes: dict[str, list[str]] = {}
    for case in ET.parse(report).iter("testcase"):
        name = case.get("name").split("[")[0]
        kind = "failed" if case.find("failure") is not None or case.find("error") is not None else (
            "skipped" if case.find("skipped") is not None else "passed")
        outcomes.setdefault(name, []).append(kind)
    return {n: ("failed" if "failed" in o else "skipped" if "skipped" in o else "passed") for n, o in outcomes.items()}


def verdict(added: dict[str, list[str]], steps: list[Step], results: dict[str, dict[str, str]]) -> bool:
    patch_names = list(added)
    width = max(len(n) for names in added.values() for n in names) + 2
    print("\n" + f"{'test (added by)':<{width + 6}}" + "".join(f"{s.label:>16}" for s in steps))
    ok = True
    for k, patch in enumerate(patch_names, start=1):
        for test in added[patch]:
            row = [results[s.label].get(test, "missing") for s in steps]
            # steps[0] is stock; steps[j] has the first j patches
            expected = ["failed" if j < k else "passed" for j in range(len(steps))]
            good = all(got == want for got, want in zip(row, expected) if want == "passed") and row[k - 1] == "failed"
            ok &= good
            print(f"{test:<{width}}{patch[:4]:>4}  " + "".join(f"{r:>16}" for r in row) + ("" if good else "   <- !"))
    print("\nevery added test fails before its patch and passes with it and every later one" if ok else
          "\nFAILED: some added test does not fail before its patch or does not pass from it on")
    return ok


def write_ini(folder: Path) -> None:
    (folder / "pytest.ini").write_text("[pytest]\nfilterwarnings =\n    ignore::UserWarning\n    ignore::DeprecationWarning\n")


def patched_test_module(root: Path, series_dir: Path, patches: list[Patch], path: str) -> str:
    """The test module ``path`` under ``root`` as ``git am`` leaves it. Its hunks append tests at its end, where the
    context (a test's last lines) can recur: ``git apply`` places such a hunk by its header's line, as ``git am``
    does, where the overlay's engine refuses it (AmbiguousHunkError), as it must for thunder's own code."""
    with tempfile.TemporaryDirectory(prefix="thunder-overlay-tests-") as work:
        target = Path(work) / path
        target.parent.mkdir(parents=True)
        target.write_text((root / path).read_text())
        for patch in patches:
            if patch.diff_of(path) is not None:
                proc = subprocess.run(["git", "apply", f"--include={path}", str(series_dir / patch.name)], cwd=work,
                                      capture_output=True, text=True)
                if proc.returncode:
                    raise SystemExit(f"{patch.name} does not apply to {path}: {proc.stderr.strip()}")
        return target.read_text()


def installed(args) -> int:
    env = dict(os.environ, PYTHONWARNINGS="ignore", CUDA_VISIBLE_DEVICES="")
    if args.pythonpath:
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(Path(args.pythonpath).resolve()), env.get("PYTHONPATH")]))
    probe = "import thunder, pathlib; print(pathlib.Path(thunder.__file__).parent)"
    proc = subprocess.run([sys.executable, "-c", probe], env=dict(env, THUNDER_OVERLAY="0"), capture_output=True, text=True)
    if proc.returncode:
        print(f"cannot import thunder: {proc.stderr.strip()[-500:]}", file=sys.stderr)
        return 2
    thunder_dir = Path(proc.stdout.split()[-1])
    bases = manifest.load()
    hashes = manifest.hashes_under(thunder_dir.parent, manifest.target_paths(bases))
    base = manifest.base_for_files(bases, hashes)
    if base is None:
        print(f"{thunder_dir} is no base of the manifest (sha256 of its files: {hashes})", file=sys.stderr)
        return 2
    patches = read_series(base.directory)
    added = added_tests(patches)
    print(f"thunder {thunder_dir} (base {base.directory.name}): series {', '.join(p.name for p in patches)}")
    with tempfile.TemporaryDirectory(prefix="thunder-overlay-upstream-") as tmp:
        tmp = Path(tmp)
        test_dir = Path(args.keep).resolve() if args.keep else tmp / "tests"
        test_dir.mkdir(parents=True, exist_ok=True)
        for path in test_paths(patches):
            (test_dir / Path(path).name).write_text(patched_test_module(thunder_dir.parent, base.directory, patches, path))
        shutil.copy(thunder_dir / "tests" / "conftest.py", test_dir / "conftest.py")
        write_ini(test_dir)
        steps = [Step("stock", dict(env, THUNDER_OVERLAY="0"))]
        for k in range(1, len(patches) + 1):
            series_dir = tmp / f"patches-{k}"
            shutil.copytree(base.directory.parent, series_dir, ignore=shutil.ignore_patterns("*.patch", "series"))
            for patch in patches[:k]:
                shutil.copy(patch.name, series_dir / base.directory.name)
            (series_dir / base.directory.name / "series").write_text("\n".join(Path(p.name).name for p in patches[:k]) + "\n")
            # the manifest lists exactly the files a series changes: those of the first k patches
            changed = [p for p in base.files if any(p in patch.patched_paths() for patch in patches[:k])]
            prefix_manifest = series_dir / config.MANIFEST
            prefix_manifest.write_text(manifest.with_files(prefix_manifest.read_text(), base.name,
                                                           {p: base.files[p] for p in changed}))
            label = f"+{Path(patches[k - 1].name).name[:4]}"
            steps.append(Step(label, dict(env, THUNDER_OVERLAY="strict", THUNDER_OVERLAY_PATCHES=str(series_dir))))
        names = [n for ns in added.values() for n in ns]
        results = {s.label: run_tests(test_dir, names, s.env, s.label) for s in steps}
        ok = verdict({Path(k).name: v for k, v in added.items()}, steps, results)
        if args.keep:
            print(f"patched test modules left in {test_dir}")
    return 0 if ok else 1


def git(checkout: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess:
    proc = subprocess.run(["git", "-C", str(checkout), *args], capture_output=True, text=True)
    if check and proc.returncode:
        raise SystemExit(f"git {' '.join(args)}: {proc.stderr.strip()}")
    return proc


def pinned_formatter(worktree: Path) -> tuple[str, str]:
    """The formatter the checkout's pre-commit pins, as (tool, version): ruff on 0.2.4 and later, black before
    (where the ruff hook is commented out)."""
    pre_commit = worktree / ".pre-commit-config.yaml"
    text = pre_commit.read_text() if pre_commit.is_file() else ""
    for tool, pattern in (("ruff", r"^\s*- repo: \S*ruff-pre-commit\s*\n\s*rev:\s*v?([\w.]+)"),
                          ("black", r"^\s*- repo: \S*psf/black\s*\n\s*rev:\s*v?([\w.]+)")):
        if match := re.search(pattern, text, re.M):
            return tool, match.group(1)
    raise SystemExit(f"{pre_commit} pins neither ruff nor black")


def pinned_tool(tool: str, version: str) -> Path:
    """A folder with ``tool==version`` installed (pip --target), kept in the user's cache for later runs."""
    folder = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "thunder-overlay" / "tools" / f"{tool}-{version}"
    if not (folder / ".complete").is_file():
        print(f"installing {tool}=={version} (the checkout's pre-commit pin) into {folder}", flush=True)
        shutil.rmtree(folder, ignore_errors=True)
        proc = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--target", str(folder), f"{tool}=={version}"],
                              capture_output=True, text=True)
        if proc.returncode:
            raise SystemExit(f"cannot install {tool}=={version}: {proc.stderr.strip()[-1000:]}")
        (folder / ".complete").write_text("")
    return folder


def style_commands(worktree: Path) -> tuple[str, list[tuple[str, list[str], list[str]]], dict[str, str]]:
    """How the checkout's pre-commit checks style: (tool, [(what, check command, report command)], env), without
    files. A report lists findings one per line (a formatter's diff, a linter's concise output)."""
    tool, version = pinned_formatter(worktree)
    folder = pinned_tool(tool, version)
    env = dict(os.environ, PYTHONPATH=str(folder))
    if tool == "ruff":
        ruff = str(folder / "bin" / "ruff")
        return f"ruff {version}", [("format --check", [ruff, "format", "--check"], [ruff, "format", "--diff"]),
                                   ("check", [ruff, "check"], [ruff, "check", "--output-format", "concise"])], env
    black = [sys.executable, "-m", "black", "--quiet"]
    return f"black {version}", [("--check", [*black, "--check"], [*black, "--diff"])], env


def style_clean(worktree: Path, commit: str, label: str, style) -> bool:
    """The checkout's pinned formatter (and ruff's linter where it pins ruff), with the checkout's configuration,
    on the files the commit changes as they are at that commit: a later commit must not be what makes an earlier
    one pass. Where a file is faulted already before the commit (0.2.1's jit_ext.py under black), only findings
    the commit adds count."""
    name, commands, env = style
    changed = [p for p in git(worktree, "diff", "--name-only", f"{commit}~1", commit).stdout.split() if p.endswith(".py")]
    ok = True
    for what, check, report in commands:
        proc = subprocess.run([*check, *changed], cwd=worktree, env=env, capture_output=True, text=True)
        added = [] if proc.returncode == 0 else findings_added(worktree, commit, report, changed, env)
        print(f"  [{label}] {name} {what} on {len(changed)} files: "
              + ("ok" if not added else "FAILED\n  " + "\n  ".join(added[:40])), flush=True)
        ok &= not added
    return ok


def findings_added(worktree: Path, commit: str, report: list[str], files: list[str], env) -> list[str]:
    """The lines of the tool's report on the files at ``commit`` that its report at the parent lacks (numbers
    masked, so that moved lines match). A file the commit adds counts whole."""
    def findings(rev: str) -> set[str]:
        with tempfile.TemporaryDirectory() as tmp:
            for config in ("pyproject.toml", "setup.cfg", "ruff.toml", ".ruff.toml"):
                if (worktree / config).is_file():
                    shutil.copy(worktree / config, Path(tmp) / config)
            present = []
            for path in files:
                shown = git(worktree, "show", f"{rev}:{path}", check=False)
                if shown.returncode == 0:
                    (Path(tmp) / path).parent.mkdir(parents=True, exist_ok=True)
                    (Path(tmp) / path).write_text(shown.stdout)
                    present.append(path)
            proc = subprocess.run([*report, *present], cwd=tmp, env=env, capture_output=True, text=True) if present else None
            out = (proc.stdout + proc.stderr).splitlines() if proc else []
            return {re.sub(r"\d+", "N", line) for line in out
                    if (line[:1] in "+-" and line[:3] not in ("+++", "---")) or re.match(r"\S+\.py:\d+:\d+: ", line)}
    return sorted(findings(commit) - findings(f"{commit}~1"))


def on_git(args) -> int:
    checkout = Path(args.thunder_git).resolve()
    if args.series is None:
        bases = manifest.load()
        hashes = {path: sha256_at(checkout, args.rev, path) for path in manifest.target_paths(bases)}
        base = manifest.base_for_files(bases, hashes)
        if base is None:
            print(f"{args.rev} is no base of the manifest (sha256 of its files: {hashes}): pass --series",
                  file=sys.stderr)
            return 2
        args.series = base.name
    series_dir = Path(config.patches_dir()[0]) / args.series
    if not (series_dir / "series").is_file():
        print(f"no series {args.series} (patches/{args.series}/series)", file=sys.stderr)
        return 2
    patches = read_series(series_dir)
    added = added_tests(patches)
    rev = git(checkout, "rev-parse", "--verify", f"{args.rev}^{{commit}}").stdout.strip()
    ok = True
    with tempfile.TemporaryDirectory(prefix="thunder-overlay-upstream-") as tmp:
        tmp = Path(tmp)
        worktree = tmp / "thunder"
        git(checkout, "worktree", "add", "-q", "--detach", str(worktree), rev)
        try:
            print(f"{checkout} at {args.rev} = {rev}")
            am = git(worktree, "-c", "user.name=thunder-overlay", "-c", "user.email=upstream-check@invalid",
                     "am", "--no-3way", *[p.name for p in patches], check=False)
            print(("git am: applied " + ", ".join(Path(p.name).name for p in patches)) if am.returncode == 0 else
                  f"git am FAILED:\n{am.stdout}{am.stderr}")
            if am.returncode:
                git(worktree, "am", "--abort", check=False)
                return 1
            style = style_commands(worktree)
            test_dir = tmp / "tests"
            test_dir.mkdir()
            for path in test_paths(patches):
                shutil.copy(worktree / path, test_dir / Path(path).name)
            shutil.copy(worktree / "thunder" / "tests" / "conftest.py", test_dir / "conftest.py")
            write_ini(test_dir)
            commits = git(worktree, "rev-list", "--reverse", f"{rev}..HEAD").stdout.split()
            env = dict(os.environ, PYTHONPATH=str(worktree), THUNDER_OVERLAY="0", PYTHONWARNINGS="ignore",
                       CUDA_VISIBLE_DEVICES="")
            names = [n for ns in added.values() for n in ns]
            steps, results = [], {}
            for k, commit in enumerate([rev, *commits]):
                git(worktree, "checkout", "-q", "--detach", commit)
                label = "stock" if k == 0 else f"+{Path(patches[k - 1].name).name[:4]}"
                if k:
                    ok &= style_clean(worktree, commit, label, style)
                steps.append(Step(label, env))
                results[label] = run_tests(test_dir, names, env, label)
            ok &= verdict({Path(k).name: v for k, v in added.items()}, steps, results)
        finally:
            git(checkout, "worktree", "remove", "--force", str(worktree), check=False)
    return 0 if ok else 1


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    here = sub.add_parser("installed", help="the installed thunder, stock and with the overlay's series step by step")
    here.add_argument("--pythonpath", help="thunder from `pip install --no-deps --target DIR` instead of the environment's")
    here.add_argument("--keep", metavar="DIR", help="leave the patched test modules in DIR")
    here.set_defaults(func=installed)
    tree = sub.add_parser("git", help="a thunder git checkout: git am, ruff, and the added tests commit by commit")
    tree.add_argument("--thunder-git", required=True, metavar="CHECKOUT", help="a lightning-thunder git checkout")
    tree.add_argument("--rev", default="main", help="the revision to apply the series to (default: main)")
    tree.add_argument("--series", default=None, help="which series of patches/ to apply (default: the base whose "
                      "files REV has)")
    tree.set_defaults(func=on_git)
    args = parser.parse_args()
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
