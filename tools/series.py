"""Regenerate the patch series of every base from commits in a lightning-thunder git checkout.

The series is developed as commits on a branch of a thunder checkout, ``thunder-overlay/0.2.6`` on the tag
``0.2.6`` (never vendored into this project: pass the checkout's path). Then:

    python tools/series.py port --thunder-git DIR     # cherry-pick the 0.2.6 commits onto every other base
    python tools/series.py export --thunder-git DIR   # git format-patch each base's branch into patches/<base>/

``port`` makes ``thunder-overlay/<base>`` from the base's tag for every base in patches/manifest.toml. A
commit's changes to thunder's files (``thunder/core/jit_ext.py``, ``thunder/core/interpreter.py``, any
other outside ``thunder/tests/``) must cherry-pick cleanly; the tests it appends to a test module are
appended to that release's module (test modules grow at the end, so their tails differ between releases).
A release whose test_jit_general.py has no ``thunder_jit`` helper gets ``thunder.jit`` instead. Anything
else that does not apply stops the tool with the base, commit and file.

``export`` also writes each base's ``[base.files]`` in the manifest: the sha256 at the base's tag of every
file of thunder its series changes (the overlay patches exactly those). Every release a base lists must
ship the same bytes of those files; where one differs, ``export`` stops: that release needs its own base.

A base listed in ``HAND_PORTED`` carries a change the 0.2.6 commits do not have, so ``port`` leaves its
branch alone: make it with ``git am patches/<base>/*.patch`` on the tag and amend it by hand.
"""

from __future__ import annotations

import argparse
import hashlib
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "overlay"))
from thunder_overlay import config, manifest  # noqa: E402
from thunder_overlay.patchset import read_series  # noqa: E402

BRANCH = "thunder-overlay/{}"
SOURCE_BASE = "0.2.6"
HAND_PORTED = {
    "0.2.1": "under no_grad Symbol.__call__ copies a symbol's outputs with their names (0002: the copies are renamed "
    "with the proxy they copy, and symbol.py keeps a copy's generated name weak)",
    "0.2.2": "as 0.2.1",
    "0.2.3": "0002 changes jit_ext.py's pytree import, which 0.2.3 has without the dtensor imports beside it",
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
            git(checkout, "reset", "-q", "--hard", "HEAD")  # a cherry-pick -n leaves nothing to --abort
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


def port(checkout: Path, only: list[str] | None = None) -> None:
    source = BRANCH.format(SOURCE_BASE)
    commits = git(checkout, "rev-list", "--reverse", f"{SOURCE_BASE}..{source}").split()
    if not commits:
        raise SystemExit(f"no commits on {source} above the tag {SOURCE_BASE}")
    if git(checkout, "status", "--porcelain", "--untracked-files=no").strip():
        raise SystemExit(f"{checkout} has uncommitted changes")
    start = git(checkout, "rev-parse", "--abbrev-ref", "HEAD").strip()
    try:
        for base in manifest.load(new_bases=True):
            tag = base.directory.name
            if tag == SOURCE_BASE or (only and tag not in only):
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


def release_rev(release: str) -> str:
    """The git revision of a release the manifest lists: its tag, or the commit of main@REV."""
    return release.partition("@")[2] if release.startswith("main@") else release


def sha256_at(checkout: Path, rev: str, path: str) -> str | None:
    """The sha256 of ``path`` at ``rev`` of the checkout; None where it has no such file."""
    proc = subprocess.run(["git", "-C", str(checkout), "show", f"{rev}:{path}"], capture_output=True)
    return hashlib.sha256(proc.stdout).hexdigest() if proc.returncode == 0 else None


def file_hashes(checkout: Path, base: manifest.Base, paths: list[str]) -> dict[str, str]:
    """{path: sha256} at the base's tag; stops when a release the base lists ships other bytes of a file."""
    tag = base.directory.name
    hashes = {path: sha256_at(checkout, tag, path) for path in paths}
    if missing := [p for p, h in hashes.items() if h is None]:
        raise SystemExit(f"{tag} has no {', '.join(missing)}, which its series changes")
    for release in base.releases:
        rev = release_rev(release)
        if git(checkout, "rev-parse", "-q", "--verify", f"{rev}^{{commit}}", check=False).strip():
            differ = [p for p in paths if sha256_at(checkout, rev, p) != hashes[p]]
            if differ:
                raise SystemExit(f"{release} and {tag} share the base {tag} but differ in {', '.join(differ)}: "
                                 f"give {release} its own [[base]] and series")
    return hashes


def export(checkout: Path, only: list[str] | None = None) -> None:
    manifest_file = Path(config.patches_dir()[0]) / config.MANIFEST
    for base in manifest.load(new_bases=True):
        tag = base.directory.name
        if only and tag not in only:
            continue
        for old in base.directory.glob("*.patch"):
            old.unlink()
        git(checkout, "format-patch", "-q", "--zero-commit", "--no-signature", "--filename-max-length=100", "-o", str(base.directory),
            f"{tag}..{BRANCH.format(tag)}")
        names = sorted(p.name for p in base.directory.glob("*.patch"))
        releases = ", ".join(base.releases)
        (base.directory / "series").write_text(
            f"# Applied in order to lightning-thunder {releases}. The overlay applies each patch to every\n"
            "# file of thunder it changes but the tests (patches/manifest.toml lists them and their hashes);\n"
            "# `git am` applies all of it, tests included\n" + "\n".join(names) + "\n"
        )
        paths = list(dict.fromkeys(p for patch in read_series(base.directory) for p in patch.patched_paths()))
        hashes = file_hashes(checkout, base, paths)
        manifest_file.write_text(manifest.with_files(manifest_file.read_text(), base.name, hashes))
        print(f"patches/{tag}: {', '.join(names)}; changes {', '.join(paths)}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("command", choices=("port", "export"), help="port: cherry-pick onto every base; export: "
                        "write patches/<base>/ from the branches")
    parser.add_argument("--thunder-git", type=Path, required=True, help="a lightning-thunder git checkout with tags")
    parser.add_argument("--bases", nargs="+", metavar="BASE", help="only these bases (their directory names under "
                        "patches/); default: every base of the manifest")
    args = parser.parse_args()
    if unknown := set(args.bases or ()) - {b.directory.name for b in manifest.load(new_bases=True)}:
        parser.error(f"no base {', '.join(sorted(unknown))} in patches/manifest.toml")
    {"port": port, "export": export}[args.command](args.thunder_git.resolve(), args.bases)
    return 0


if __name__ == "__main__":
    sys.exit(main())
