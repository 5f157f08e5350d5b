"""The ``thunder-overlay`` command: status | diff | verify | names | cache.

Each subcommand is one ``_name(args)`` function and one ``_add_name(subparsers)`` that declares it with
its help; ``main`` lists them in SUBCOMMANDS.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import warnings

# thunder warns at import when transformer_engine is missing (always, on CPU machines): noise here.
THUNDER_IMPORT_NOISE = "transformer_engine module not found"


def _positive(kind):
    """An argparse type: a number of ``kind`` above zero (a timeout of -3 s or 0 jobs is a typo, not a request)."""
    def parse(text: str):
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a {'whole ' if kind is int else ''}number") from None
        if not 0 < value < float("inf"):
            raise argparse.ArgumentTypeError(f"{text!r} is not a finite number above 0")
        return value

    return parse


def _status(args) -> int:
    import thunder_overlay
    from thunder_overlay import config

    report = thunder_overlay.status(import_thunder=not args.no_import)
    changed = _verify_files(report) if args.verify else []
    if args.json:
        print(json.dumps(report))
    else:
        print(f"thunder-overlay: {report['state']}")
        for key, value in report.items():
            if key == "files":
                for file in value:
                    print("  " + _file_line(file))
            elif key == "patches":
                for patch in value:  # one a line: their names are long
                    print(f"  {'patch':<17} {patch}")
            elif key == "known":  # whether the files are a known base: said only once they were looked at
                if report["files"]:
                    print(f"  {key:<17} {value}")
            elif key != "state" and value not in (None, [], False):
                print(f"  {key:<17} {', '.join(value) if isinstance(value, list) else value}")
        if report["files"] and not args.verify and (report["bytecode_cache"] or "").startswith("hit"):
            print(f"  {'sha256':<17} {TRUSTED_BY_STAMP}")
    for file in changed:
        print(f"thunder-overlay status --verify: {file['path']} has sha256 {file['sha256_now']}, not the "
              f"{file['sha256']} reported: it changed after the decision, keeping its size and modification time. "
              "The code that runs was made from the earlier bytes; `thunder-overlay cache --clear` makes the next "
              "import decide from the bytes on disk.", file=sys.stderr)
    ok = report["state"] in (*config.PATCHED_STATES, *config.READY_STATES, "disabled")
    return 0 if ok and not changed else 1


# What a cache hit means for the sha256 that status reports: the files were not read
TRUSTED_BY_STAMP = ("from the cache entry, trusted because each file's size and modification time are those "
                    "recorded, as a .pyc trusts its source; --verify hashes the files")


def _verify_files(report: dict) -> list[dict]:
    """Hash every file the report lists; each gets ``sha256_now`` (None: unreadable) and ``verified`` (the
    same as the reported sha256). The files whose bytes differ from the report."""
    import hashlib

    for file in report["files"]:
        try:
            with open(file["path"], "rb") as f:
                file["sha256_now"] = hashlib.sha256(f.read()).hexdigest()
        except (OSError, TypeError):  # TypeError: no path (a file missing from thunder)
            file["sha256_now"] = None
        file["verified"] = file["sha256_now"] == file["sha256"]
    return [f for f in report["files"] if not f["verified"]]


def _file_line(file: dict) -> str:
    """'file              thunder.core.jit_ext: patched, sha256 506ff836... (the base's), /.../jit_ext.py'"""
    loaded = "patched" if file["patched"] else "stock" if file["imported"] else "not imported yet"
    if file["sha256"] is None:
        bytes_ = "missing"
    else:
        whose = "the base's" if file["matches_base"] else f"the base has {(file['base_sha256'] or 'none')[:12]}"
        bytes_ = f"sha256 {file['sha256'][:12]} ({whose})"
    return f"{'file':<17} {file['module']}: {loaded}, {bytes_}, {file['path']}"


def _add_status(sub) -> None:
    p = sub.add_parser(
        "status",
        help="what the overlay does to the installed thunder",
        description="Import thunder (through the overlay) and print the overlay's state and why: the state, "
        "how thunder is installed, its release, each file the series changes (its sha256, whether that is the "
        "base's, whether it runs patched), the series and patches applied, the bytecode cache, and the reason "
        "when nothing was patched. A file's sha256 comes from the cache entry when its size and modification "
        "time are those recorded (as a .pyc trusts its source); --verify hashes every file. Exit status 0 when "
        "patched, ready or switched off; 1 otherwise, or when --verify finds a file whose bytes differ.",
    )
    p.add_argument("--no-import", action="store_true",
                   help="do not import thunder; report what importing it would do (state 'ready' when it would patch)")
    p.add_argument("--json", action="store_true", help="print the report as JSON (the dict thunder_overlay.status() returns)")
    p.add_argument("--verify", action="store_true", help="hash every file the report lists and compare with its "
                   "reported sha256 (each file gets sha256_now and verified)")
    p.set_defaults(func=_status)


def _diff(args) -> int:
    from pathlib import Path

    import thunder_overlay
    from thunder_overlay.patchset import read_series

    report = thunder_overlay.status()
    if not report["patches"]:
        print(f"no active patches ({report['state']}): {report['reason']}", file=sys.stderr)
        return 1
    for patch in read_series(Path(report["series_dir"])):
        applied = [diff.text for diff in patch.files if diff.path in patch.patched_paths()]
        sys.stdout.write(f"{patch.header}\n---\n{''.join(applied)}\n")
    return 0


def _add_diff(sub) -> None:
    p = sub.add_parser(
        "diff",
        help="print the active patches",
        description="Import thunder and print, in order, each patch the overlay applied in this environment: "
        "its header (git format-patch mail: subject, DEP-3 fields) and its diff of every file of thunder it "
        "changes (the test modules that `git am` also applies upstream left out). Exit status 1 when none "
        "was applied.",
    )
    p.set_defaults(func=_diff)


def _verify(args) -> int:
    from thunder_overlay import verify

    return verify.main(jobs=args.jobs, full=args.full)


def _add_verify(sub) -> None:
    p = sub.add_parser(
        "verify",
        help="run the reproducers under stock thunder and under the overlay",
        description="Run every reproducer program of upstream #283 and #946 in its own process, once with stock "
        "thunder (THUNDER_OVERLAY=0) and once with the overlay, and print a side-by-side table. Exit status 1 "
        "when any program fails with the overlay.",
    )
    p.add_argument("--jobs", type=_positive(int), default=2, help="programs run at a time (default 2)")
    p.add_argument("--full", action="store_true", help="after the table, print everything each failing run printed "
                   "(the table cuts each failure to its last line)")
    p.set_defaults(func=_verify)


def _names(args) -> int:
    from thunder_overlay import names

    return names.main(args.targets or names.corpus_targets(), thunderfx=args.thunderfx, show_traces=args.traces,
                      as_json=args.json, timeout=args.timeout)


def _add_names(sub) -> None:
    p = sub.add_parser(
        "names",
        help="which values stock thunder and the overlay name after your program's variables",
        description="Jit each target under stock thunder and under the overlay (one process each), align the two "
        "initial computation traces symbol by symbol and report, per program, the values each side names after "
        "the program's variables and any value the overlay names worse than stock. A target is FILE.py:NAME or "
        "package.module:NAME; the file provides NAME_inputs() (or inputs()) returning the positional arguments, "
        "or a dict with 'args' and 'kwargs'. Without targets, runs the overlay's corpus. Targets are checked before "
        "any process starts. Exit status 0 when no value is lost; 1 when the overlay loses a name stock gives, or "
        "fails on a program stock compiles; 2 for a malformed target (missing file, no such NAME, no inputs) or "
        "when a side did not run as it should (the overlay side would not run patched); 3 when a program fails "
        "under stock thunder too (an exception, or the program's own sys.exit); 4 when a side ran past --timeout.",
    )
    p.add_argument("targets", nargs="*", metavar="TARGET", help="FILE.py:NAME or package.module:NAME (default: the corpus)")
    p.add_argument("--thunderfx", action="store_true", help="compile with torch.compile(backend=ThunderCompiler())")
    p.add_argument("--traces", action="store_true", help="also print both traces' names side by side")
    p.add_argument("--json", action="store_true", help="print one JSON object (per program: names, lost, errors) "
                   "instead of the table, for CI")
    from thunder_overlay.config import NAMES_TIMEOUT_S

    p.add_argument("--timeout", type=_positive(float), default=NAMES_TIMEOUT_S, metavar="SECONDS",
                   help="how long each side's process may run (default %(default)g)")
    p.set_defaults(func=_names)


def _cache(args) -> int:
    import time

    from thunder_overlay import bytecode_cache

    if args.all and not args.clear:
        print("thunder-overlay cache: --all goes with --clear (cache --clear --all)", file=sys.stderr)
        return 2
    thunder_path = None if args.all else _thunder_path()
    if args.clear and not args.all and thunder_path is None:
        print("no thunder in this environment, so no entry of its to clear; `cache --clear --all` clears every entry")
        return 0
    try:
        if args.clear:
            removed, left = bytecode_cache.clear(thunder_path)
        else:
            folder, off, found = bytecode_cache.listing()
    except OSError as e:
        print(f"thunder-overlay cache: cannot read the cache folder: {e}", file=sys.stderr)
        return 1
    if args.clear:
        whose = "" if args.all else f" of the thunder at {thunder_path}"
        print(f"removed {len(removed)} file(s){whose}" + "".join(f"\n  {p}" for p in removed))
        if left:
            print(f"left {len(left)}:" + "".join(f"\n  {p}: {why}" for p, why in left), file=sys.stderr)
        return 1 if left else 0
    if args.json:
        print(json.dumps({"folder": folder, "off": off, "entries": found}))
        return 0
    print(f"cache folder: {folder or 'none'}" + (f" (off: {off})" if off else ""))
    for item in found:
        when = time.strftime("%Y-%m-%d %H:%M", time.localtime(item["modified"]))
        what = f"for {item['thunder']}" if item["thunder"] else item["problem"]
        print(f"  {item['path']}  {item['bytes'] / 1e6:.1f} MB  {when}  {what}")
    if not found:
        print("  no entries")
    return 0


def _thunder_path() -> str | None:
    """The folder of the thunder package this environment imports, found as the path-based import would, without
    importing it; None when there is none."""
    from importlib.machinery import PathFinder

    from thunder_overlay import locate

    spec = PathFinder.find_spec("thunder")
    return None if spec is None else locate.package_folder(spec)


def _add_cache(sub) -> None:
    p = sub.add_parser(
        "cache",
        help="show or clear the bytecode cache",
        description="Print the bytecode cache folder and each entry in it (size, date, the thunder installation it "
        "was made for, or why it is not usable). The folder is shared by every environment of this user. Entries "
        "outlive an uninstall of the overlay: run `cache --clear --all` before uninstalling it, or remove the "
        "folder this command prints. An entry is remade at the next import of thunder. Exit status 0; 1 when the "
        "folder cannot be read, or --clear left something (it says what and why); 2 for --all without --clear.",
    )
    p.add_argument("--clear", action="store_true", help="remove the entries of the thunder this environment imports "
                   "(and their left temporary files); nothing outside the cache folder is touched (a link is "
                   "removed, not followed)")
    p.add_argument("--all", action="store_true", help="with --clear: remove every entry of the folder, whichever "
                   "environment made it")
    p.add_argument("--json", action="store_true", help="print the folder and entries as JSON")
    p.set_defaults(func=_cache)


SUBCOMMANDS = (_add_status, _add_diff, _add_verify, _add_names, _add_cache)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="thunder-overlay",
        description="Versioned patches for lightning-thunder (thunder/core/jit_ext.py and the other files each "
        "series changes), applied in memory when thunder is imported. See `thunder-overlay COMMAND --help`.",
        epilog="Environment: THUNDER_OVERLAY (1/on, 0/off, strict), THUNDER_OVERLAY_BASE (a series for files "
        "of no known base), THUNDER_OVERLAY_PATCHES (another patches folder), THUNDER_OVERLAY_CACHE_DIR and "
        "THUNDER_OVERLAY_CACHE=0 (the bytecode cache); see the README.",
    )
    from thunder_overlay.config import __version__

    parser.add_argument("--version", action="version", version=f"thunder-overlay {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for add in SUBCOMMANDS:
        add(sub)
    return parser


# 128 + SIGPIPE: what a shell reports for a command killed by a closed pipe (`cat big | head -c1`)
BROKEN_PIPE = 141
INTERRUPTED = 130


def main(argv: list[str] | None = None) -> int:
    warnings.filterwarnings("ignore", message=THUNDER_IMPORT_NOISE)
    for stream in (sys.stdout, sys.stderr):  # a path that is not valid UTF-8 prints escaped, never raises
        if hasattr(stream, "reconfigure"):
            stream.reconfigure(errors="backslashreplace")
    try:
        args = build_parser().parse_args(argv)
        status = args.func(args)
        sys.stdout.flush()  # here, not at exit: a reader that went away is seen here
    except BrokenPipeError:
        # The reader of the output went away (`| head -c1`): stop quietly, as other command-line tools do.
        # What is still buffered goes to /dev/null, so that the interpreter's flush at exit cannot fail again.
        devnull = os.open(os.devnull, os.O_WRONLY)
        for stream in (sys.stdout, sys.stderr):
            try:
                os.dup2(devnull, stream.fileno())
            except (OSError, ValueError):
                pass
        return BROKEN_PIPE
    except KeyboardInterrupt:
        print("thunder-overlay: interrupted", file=sys.stderr)
        return INTERRUPTED
    return status


if __name__ == "__main__":
    sys.exit(main())
