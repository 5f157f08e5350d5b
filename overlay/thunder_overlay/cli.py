"""The ``thunder-overlay`` command: status | diff | verify."""

from __future__ import annotations

import argparse
import sys


def _status(args) -> int:
    import thunder_overlay

    if not args.no_import:
        try:
            import thunder.core.jit_ext  # noqa: F401  the real import, through the overlay's finder
        except ImportError as e:
            print(f"importing thunder failed: {e}")
    report = thunder_overlay.status()
    print(f"thunder-overlay: {report['state']}")
    for key, value in report.items():
        if key != "state" and value not in (None, [], False) or key == "known":
            print(f"  {key:<17} {', '.join(value) if isinstance(value, list) else value}")
    return 0 if report["state"] in ("patched", "ready", "disabled") else 1


def _diff(args) -> int:
    from pathlib import Path

    import thunder_overlay
    from thunder_overlay import manifest

    report = thunder_overlay.status()
    if not report["patches"]:
        print(f"no active patches ({report['state']}): {report['reason']}", file=sys.stderr)
        return 1
    base = manifest.base_for(manifest.load(Path(report["patches_dir"])), report["thunder_version"])
    for name in report["patches"]:
        sys.stdout.write((base.directory / name).read_text())
    return 0


def _verify(args) -> int:
    from thunder_overlay import verify

    return verify.main(jobs=args.jobs)


def _names(args) -> int:
    from thunder_overlay import names

    targets = args.targets or names.corpus_targets()
    return names.main(targets, thunderfx=args.thunderfx, show_traces=args.traces)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="thunder-overlay", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    status = sub.add_parser("status", help="what the overlay does to the installed thunder")
    status.add_argument("--no-import", action="store_true", help="report without importing thunder")
    status.set_defaults(func=_status)
    sub.add_parser("diff", help="print the active patches").set_defaults(func=_diff)
    verify = sub.add_parser("verify", help="run the reproducers under stock thunder and under the overlay")
    verify.add_argument("--jobs", type=int, default=2, help="programs run at a time (default 2)")
    verify.set_defaults(func=_verify)
    names = sub.add_parser(
        "names",
        help="which values stock thunder and the overlay name after your program's variables",
        description="Jit each target under stock thunder and under the overlay (one process each), align the two "
        "initial computation traces symbol by symbol and report, per program, the values each side names after "
        "the program's variables and any value the overlay names worse than stock. A target is FILE.py:NAME or "
        "package.module:NAME; the file provides NAME_inputs() (or inputs()) returning the positional arguments, "
        "or a dict with 'args' and 'kwargs'. Without targets, runs the overlay's corpus. Exit status 1 when a "
        "value is lost.",
    )
    names.add_argument("targets", nargs="*", metavar="TARGET", help="FILE.py:NAME or package.module:NAME")
    names.add_argument("--thunderfx", action="store_true", help="compile with torch.compile(backend=ThunderCompiler())")
    names.add_argument("--traces", action="store_true", help="also print both traces' names side by side")
    names.set_defaults(func=_names)
    args = parser.parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
