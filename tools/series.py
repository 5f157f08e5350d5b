"""Regenerate the patch series of every base from commits in a lightning-thunder git checkout.

The series is developed as commits on a branch of a thunder checkout, ``thunder-overlay/0.2.6`` on the tag
``0.2.6`` (never vendored into this project: pass the checkout's path). Then:

    python tools/series.py port --thunder-git DIR     # cherry-pick the 0.2.6 commits onto every other base
    python tools/series.py export --thunder-git DIR   # git format-patch each base's branch into patches/<base>/

``port`` makes ``thunder-overlay/<base>`` from the base's tag for every base in patches/manifest.toml. A
commit's changes to ``thunder/core/jit_ext.py`` must cherry-pick cleanly; the tests it appends to a test
module are appended to that release's module (test modules grow at the end, so their tails differ between
releases). A release whose test_jit_general.py has no ``thunder_jit`` helper gets ``thunder.jit`` instead.
Anything else that does not apply stops the tool with the base, commit and file.

A base listed in ``HAND_PORTED`` carries a change the 0.2.6 commits do not have, so ``port`` leaves its
branch alone: make it with ``git am patches/<base>/*.patch`` on the tag and amend it by hand.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "overlay"))
from thunder_overlay import manifest  # noqa: E402

BRANCH = "thunder-overlay/{}"
SOURCE_BASE = "0.2.6"
HAND_PORTED = {
    "0.2.1": "its 0002 also counts counted-out t<n> names of no_grad output copies as generated (symbol.py of "
    "0.2.1 and 0.2.2 copies every output under no_grad, and the copy loses the weak-name flag)",
}


def git(checkout: Path, *args: str, check: bool = True) -> str:
    proc = subprocess.run(["git", "-C", str(checkout), *args], capture_output=True, text=True)
    if check and proc.returncode != 0:
        raise SystemExit(f"git {' '.join(args)} failed in {checkout}:\n{proc.stderr.strip()}")
    return proc.stdout


def appended_text(checkout: Path, commit: str, path: str) -> str:
    """What ``commit`` appends to ``path``; stops when the commit changes the file anywhere but at its end."""
    before = git(checkout, "show", f"{commit}~1:{path}")
    after = git(checkout, "show", f"{commit}:{path}")
    if not after.startswith(before):
        raise SystemExit(f"{commit[:10]} changes {path} above its end; port it by hand")
    return after[len(before) :]


def port_commit(checkout: Path, commit: str, base: str) -> None:
    proc = subprocess.run(["git", "-C", str(checkout), "cherry-pick", "-n", commit], capture_output=True, text=True)
    conflicts = git(checkout, "diff", "--name-only", "--diff-filter=U").split()
    if proc.returncode != 0 and not conflicts:
        raise SystemExit(f"cherry-pick of {commit[:10]} onto {base} failed:\n{proc.stderr.strip()}")
    for path in conflicts:
        if not path.startswith("thunder/tests/"):
            git(checkout, "cherry-pick", "--abort", check=False)
            raise SystemExit(f"{commit[:10]} does not apply to {path} of {base}; port it by hand")
        git(checkout, "checkout", "--ours", "--", path)
        target = checkout / path
        target.write_text(target.read_text() + appended_text(checkout, commit, path))
    for path in git(checkout, "diff", "--cached", "--name-only", "HEAD").split() + conflicts:
        target = checkout / path
        if path.startswith("thunder/tests/") and "thunder_jit(" in target.read_text():
            if "\nthunder_jit = " not in target.read_text():
                target.write_text(target.read_text().replace("thunder_jit(", "thunder.jit("))
        git(checkout, "add", "--", path)
    git(checkout, "commit", "-q", "--no-verify", "-C", commit)


def port(checkout: Path) -> None:
    source = BRANCH.format(SOURCE_BASE)
    commits = git(checkout, "rev-list", "--reverse", f"{SOURCE_BASE}..{source}").split()
    if not commits:
        raise SystemExit(f"no commits on {source} above the tag {SOURCE_BASE}")
    if git(checkout, "status", "--porcelain", "--untracked-files=no").strip():
        raise SystemExit(f"{checkout} has uncommitted changes")
    start = git(checkout, "rev-parse", "--abbrev-ref", "HEAD").strip()
    try:
        for base in manifest.load():
            tag = base.directory.name
            if tag == SOURCE_BASE:
                continue
            if tag in HAND_PORTED:
                print(f"{BRANCH.format(tag)}: left alone, ported by hand: {HAND_PORTED[tag]}")
                continue
            git(checkout, "checkout", "-q", "-B", BRANCH.format(tag), tag)
            for commit in commits:
                port_commit(checkout, commit, tag)
            print(f"{BRANCH.format(tag)}: {len(commits)} commits ported onto {tag}")
    finally:
        git(checkout, "checkout", "-q", start)


def export(checkout: Path) -> None:
    for base in manifest.load():
        tag = base.directory.name
        for old in base.directory.glob("*.patch"):
            old.unlink()
        git(checkout, "format-patch", "-q", "--zero-commit", "--no-signature", "--filename-max-length=100", "-o", str(base.directory),
            f"{tag}..{BRANCH.format(tag)}")
        names = sorted(p.name for p in base.directory.glob("*.patch"))
        releases = ", ".join(base.releases)
        (base.directory / "series").write_text(
            f"# Applied in order to lightning-thunder {releases}; the overlay applies the thunder/core/jit_ext.py\n"
            "# part of each patch, `git am` applies all of it (tests included)\n" + "\n".join(names) + "\n"
        )
        print(f"patches/{tag}: {', '.join(names)}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("command", choices=("port", "export"), help="port: cherry-pick onto every base; export: "
                        "write patches/<base>/ from the branches")
    parser.add_argument("--thunder-git", type=Path, required=True, help="a lightning-thunder git checkout with tags")
    args = parser.parse_args()
    {"port": port, "export": export}[args.command](args.thunder_git.resolve())
    return 0


if __name__ == "__main__":
    sys.exit(main())
