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
    args = parser.parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
