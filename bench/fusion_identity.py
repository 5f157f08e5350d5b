"""Fusion identity: does the overlay hand nvFuser (and the torch executor) exactly stock's program?

    python bench/fusion_identity.py [--workloads W ...] [--modes inference grad] [--executors nvfuser torch]
    python bench/fusion_identity.py --workloads llama2-like nanogpt --distributed ddp fsdp-zero2-none ...

For each workload of bench/workloads.py, mode (inference; with gradients) and executors (thunder's
default executors with nvFuser; the torch executor alone), stock thunder (THUNDER_OVERLAY=0) and the
overlay (THUNDER_OVERLAY=1) compile the workload in separate child processes (fusion_capture.py) on fake
cuda:0 inputs, without running it. The final forward and backward execution traces must be equal up
to a consistent renaming of proxies, and each nvFusion region's FusionDefinition text byte-identical.
With ``--distributed``, each module workload is wrapped in ``ddp`` or ``fsdp`` (device cuda:0) under torch's
fake process group (rank 0 of 2; collectives are traced, nothing is sent): the regions around the
collectives and their FusionDefinitions are compared the same way.

Without a CUDA device the children load a stand-in for the CUDA runtime's device queries
(cudart_standin.c, built here with gcc); with a real device they use the real runtime.

Exit codes: 0 every case compared and identical (a stock crash the workload is known for counts as
expected); 1 a difference, or the overlay crashed where stock compiled; 2 a side could not run (no
result, or an unexpected stock crash); 3 nothing different, but cases were skipped because the
environment lacks nvFuser (run bench/setup-nvfuser.sh) or the stand-in could not be built.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(HERE))

import cuda_standin  # noqa: E402
from distributed_capture import CONFIGS  # noqa: E402
from fusion_capture import STANDIN_ENV  # noqa: E402
from thunder_overlay import equivalence  # noqa: E402

EXIT_IDENTICAL, EXIT_DIFFERENT, EXIT_SIDE_FAILED, EXIT_SKIPPED = 0, 1, 2, 3
_SEVERITY = {EXIT_IDENTICAL: 0, EXIT_SKIPPED: 1, EXIT_SIDE_FAILED: 2, EXIT_DIFFERENT: 3}


def worse(a: int, b: int) -> int:
    """The exit code that wins: a difference outranks a failed side, which outranks a skip."""
    return max(a, b, key=_SEVERITY.__getitem__)


# the workloads of the issue: every one of bench/workloads.py except the two scaled-up ones
DEFAULT_WORKLOADS = (
    "autocast-seed",
    "autocast-chain",
    "seed946",
    "seed946-retrace",
    "chain-100",
    "chain-1000",
    "llama2-like",
    "gpt-neox-like",
    "nanogpt",
)
MODES = ("inference", "grad")
# measured 2026-12-03, thunder 0.2.6: stock fails on ddp/fsdp modules without gradients, on CPU with gloo too
DISTRIBUTED_INFERENCE = (
    "thunder cannot run ddp or fsdp on a module whose parameters do not require grad, stock included "
    "(\"Failed to find an executor for bound symbol ... thunder.distributed.prims.synchronize\": only the "
    "autodiff pass lowers synchronize); --modes inference shows it"
)
EXECUTOR_KINDS = ("nvfuser", "torch")

_PROBE = (
    """
import importlib.util, json, sys
out = {"python": sys.version.split()[0], "nvfuser_wheel": importlib.util.find_spec("nvfuser_direct") is not None}
import torch
out["torch"] = torch.__version__
out["cuda"] = torch.cuda.is_available()
if out["cuda"]:
    from thunder.executors import nvfuser_available
    out["nvfuser_available"] = nvfuser_available()
    out["device"] = torch.cuda.get_device_name(0) if not __import__("os").environ.get("%s") else "stand-in"
print(json.dumps(out))
"""
    % STANDIN_ENV
)


@dataclass
class Case:
    workload: str
    mode: str
    kind: str
    verdict: str = ""
    regions: str = "-"
    fds_compared: int = 0
    renamed: int = 0  # proxies named differently by stock and overlay, forward + backward
    details: list[str] = field(default_factory=list)


def default_python(kinds) -> str:
    venv312 = REPO / ".venv312" / "bin" / "python"
    return str(venv312) if "nvfuser" in kinds and venv312.exists() else sys.executable


def probe(python: str, env: dict) -> dict:
    proc = subprocess.run([python, "-c", _PROBE], capture_output=True, text=True, env=env, timeout=300)
    if proc.returncode != 0:
        return {"error": proc.stderr.strip().splitlines()[-1] if proc.stderr.strip() else f"rc {proc.returncode}"}
    return json.loads(proc.stdout.strip().splitlines()[-1])


def prepare_environment(python: str, kinds, cache_dir) -> tuple[dict, dict, str]:
    """(child environment, {kind: reason it is skipped}, a sentence on the CUDA runtime in use)."""
    env = dict(os.environ)
    env.pop("LD_PRELOAD", None)
    env.pop(STANDIN_ENV, None)
    skipped: dict[str, str] = {}
    plain = probe(python, env)
    if "error" in plain:
        raise SystemExit(f"fusion_identity: {python} cannot import torch: {plain['error']}")
    if plain["cuda"]:
        runtime = f"the real CUDA runtime ({plain.get('device')})"
        if "nvfuser" in kinds and not plain.get("nvfuser_available"):
            skipped["nvfuser"] = "thunder finds no usable nvFuser in this environment"
        return env, skipped, runtime
    driver = cuda_standin.real_driver()
    if driver:
        # a device may be there with torch unable to use it: never answer for it with the stand-in
        skipped["nvfuser"] = f"a CUDA driver is present ({driver}) but torch sees no device; fix the driver"
        return env, skipped, "no CUDA runtime torch can use (driver present, stand-in refused)"
    try:
        standin = cuda_standin.build(python, cache_dir)
    except cuda_standin.StandinUnavailable as e:
        skipped["nvfuser"] = f"no CUDA-runtime stand-in: {e}"
        return env, skipped, "no CUDA runtime (no device, no stand-in)"
    print(f"fusion_identity: no CUDA device; children preload {standin}")
    env["LD_PRELOAD"] = str(standin)
    env[STANDIN_ENV] = str(standin)
    runtime = "a stand-in for the CUDA runtime's device queries (bench/cudart_standin.c: one sm_90 device)"
    if "nvfuser" in kinds:
        if not plain["nvfuser_wheel"]:
            skipped["nvfuser"] = (
                f"no nvFuser wheel for Python {plain['python']} / torch {plain['torch']} "
                "(run bench/setup-nvfuser.sh: nvFuser wheels are CPython 3.12 only)"
            )
        elif not probe(python, env).get("nvfuser_available"):
            skipped["nvfuser"] = "nvFuser does not load even with the CUDA-runtime stand-in"
    return env, skipped, runtime


def run_both(commands: dict, timeout: int) -> dict:
    """{side: (argv, env)} run at the same time, one process each -> {side: (returncode, stdout, stderr)}; a
    side past ``timeout`` seconds is killed and says so in its stderr."""
    procs = {
        side: subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for side, (cmd, env) in commands.items()
    }
    done = {}
    for side, proc in procs.items():
        try:
            out, err = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            out, err = proc.communicate()
            err += f"\n(timed out after {timeout} s)"
        done[side] = (proc.returncode, out, err)
    return done


def run_sides(python, env, workload, modes, kinds, overlay_workloads, timeout, config=None) -> dict:
    """Both sides of one workload, at the same time (one process each)."""
    commands = {}
    for side, switch in (("stock", "0"), ("overlay", "1")):
        cmd = [python, str(HERE / "fusion_capture.py"), workload, "--modes", *modes, "--executors", *kinds]
        if config:
            cmd += ["--distributed", config]
        if side == "overlay" and overlay_workloads:
            cmd += ["--workloads-file", str(overlay_workloads)]
        commands[side] = (cmd, dict(env, THUNDER_OVERLAY=switch))
    results = {}
    for side, (returncode, out, err) in run_both(commands, timeout).items():
        lines = out.strip().splitlines()
        if returncode == 0 and lines:
            results[side] = json.loads(lines[-1])
        else:
            results[side] = {"died": f"rc {returncode}: {err.strip()[-1500:]}"}
    return results


def _regions(capture: dict) -> tuple[list[str], list[str]]:
    return list(capture.get("forward", {}).get("fusions", {})), list(capture.get("backward", {}).get("fusions", {}))


def judge(case: Case, stock: dict, overlay: dict, stock_crash_expected: bool) -> int:
    """Fill the case's verdict from both sides' captures; returns the case's exit code."""
    fwd, bwd = _regions(overlay)
    if "error" not in overlay and case.kind == "nvfuser":
        case.regions = f"{len(fwd)}/{len(bwd)}"
    cannot = "NvFuserCannotRun: "
    if stock.get("error", "").startswith(cannot) and overlay.get("error", "").startswith(cannot):
        case.verdict = "cannot run"
        case.details.append(f"stock cannot run nvFuser here, nor the overlay: {stock['error'][len(cannot):]}")
        return EXIT_SKIPPED
    if "error" in stock and "error" in overlay:
        case.verdict = "both-crash"
        case.details += [f"stock: {stock['error']}", f"overlay: {overlay['error']}"]
        return EXIT_SIDE_FAILED
    if "error" in stock:
        case.verdict = "stock-crash"
        case.details.append(f"stock: {stock['error'][:300]}")
        if case.kind == "nvfuser":
            case.details.append(f"overlay's regions: forward {', '.join(fwd) or '-'}; backward {', '.join(bwd) or '-'}")
        return EXIT_IDENTICAL if stock_crash_expected else EXIT_SIDE_FAILED
    if "error" in overlay:
        case.verdict = "overlay-crash"
        case.details.append(f"overlay: {overlay['error']}")
        return EXIT_DIFFERENT
    differences = []
    for which in ("forward", "backward"):
        s, o = stock.get(which), overlay.get(which)
        if (s is None) != (o is None):
            differences.append(f"{which}: only {'stock' if o is None else 'the overlay'} has a {which} trace")
            continue
        if s is None:
            continue
        m = equivalence.match(s["text"], s["proxies"], o["text"], o["proxies"])
        case.renamed += len(m.renaming)
        diff = m.difference
        if diff is not None:
            differences.append(f"{which} trace, {diff}\n{equivalence.short_diff(s['text'], o['text'])}")
        if list(s["fusions"]) != list(o["fusions"]):
            differences.append(f"{which} regions: stock {list(s['fusions'])} vs overlay {list(o['fusions'])}")
            continue
        for name, text in s["fusions"].items():
            case.fds_compared += 1
            if text != o["fusions"][name]:
                differences.append(
                    f"{which} {name} FusionDefinition:\n{equivalence.short_diff(text, o['fusions'][name])}"
                )
    if differences:
        case.verdict = "different"
        case.details += differences
        return EXIT_DIFFERENT
    case.verdict = "identical"
    return EXIT_IDENTICAL


def judge_sides(case: Case, results: dict, stock_crash_expected: bool) -> int:
    """The case's verdict from both child processes' output (either may have died); its exit code."""
    sides = {}
    for side in ("stock", "overlay"):
        r = results[side]
        if "died" in r:
            case.details.append(f"{side} process: {r['died']}")
        elif side == "overlay" and r["overlay_state"] != "patched":
            case.details.append(f"overlay process: overlay state is {r['overlay_state']!r}, not 'patched'")
        else:
            sides[side] = next(c for c in r["cases"] if c["mode"] == case.mode and c["executors_kind"] == case.kind)
    if len(sides) < 2:
        case.verdict = "could not run"
        return EXIT_SIDE_FAILED
    return judge(case, sides["stock"], sides["overlay"], stock_crash_expected)


def print_table(cases: list[Case]) -> None:
    header = (
        "workload",
        "mode",
        "executors",
        "regions fwd/bwd",
        "FusionDefinitions compared",
        "proxies renamed",
        "verdict",
    )
    rows = [
        (
            c.workload,
            c.mode,
            c.kind,
            c.regions,
            str(c.fds_compared) if c.kind == "nvfuser" else "-",
            str(c.renamed) if c.verdict in ("identical", "different") else "-",
            c.verdict,
        )
        for c in cases
    ]
    print_rows(header, rows)


def print_rows(header, rows) -> None:
    """A markdown table, its columns padded to their widest cell."""
    widths = [max(len(r[i]) for r in (header, *rows)) for i in range(len(header))]
    fmt = "| " + " | ".join(f"{{:{w}}}" for w in widths) + " |"
    print(fmt.format(*header))
    print("|" + "|".join("-" * (w + 2) for w in widths) + "|")
    for r in rows:
        print(fmt.format(*r))


def what_it_proves(runtime: str) -> str:
    import textwrap

    return textwrap.fill(
        "What this proves: on fake cuda:0 inputs, thunder's final forward and backward execution traces, and "
        "the nvFuser FusionDefinition of every nvFusion region (host IR, built as at the region's first call, "
        "for contiguous inputs), are stock's up to a consistent renaming of proxies. The definitions are built "
        f"on the CPU; device queries are answered by {runtime}; nothing is compiled, allocated or launched. "
        "nvFuser compiles its kernels from these definitions, so identical definitions on identical inputs give "
        "identical kernels, launched in the same order. Timings need a GPU (bench/gpu.sh).",
        width=110,
    )


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__.splitlines()[0],
        epilog=__doc__.split("\n\n", 1)[1],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--workloads", nargs="+", default=list(DEFAULT_WORKLOADS))
    parser.add_argument("--modes", nargs="+", choices=MODES, default=None,
                        help="default: both; with --distributed, grad only (see DISTRIBUTED_INFERENCE)")
    parser.add_argument("--executors", nargs="+", choices=EXECUTOR_KINDS, default=list(EXECUTOR_KINDS))
    parser.add_argument(
        "--python",
        help="interpreter of the children (default: .venv312 when nvfuser is asked for and it exists, else this one)",
    )
    parser.add_argument(
        "--cache-dir", type=Path, help=f"where the stand-in is built (default {cuda_standin.DEFAULT_CACHE})"
    )
    parser.add_argument(
        "--overlay-workloads",
        type=Path,
        help="a copy of workloads.py for the overlay side only (to show that the check can fail)",
    )
    parser.add_argument("--timeout", type=int, default=1800, help="seconds per child process")
    parser.add_argument(
        "--distributed",
        nargs="+",
        metavar="CONFIG",
        choices=CONFIGS,
        help="also (only) through ddp / fsdp under torch's fake process group: module workloads, shown as "
        "WORKLOAD@CONFIG (" + ", ".join(CONFIGS) + ")",
    )
    opts = parser.parse_args(argv)
    if opts.modes is None:
        opts.modes = ["grad"] if opts.distributed else list(MODES)
        if opts.distributed:
            print(f"fusion_identity: --distributed compares the grad mode only: {DISTRIBUTED_INFERENCE}")

    python = opts.python or default_python(opts.executors)
    env, skipped, runtime = prepare_environment(python, opts.executors, opts.cache_dir)
    kinds = [k for k in opts.executors if k not in skipped]
    print(f"fusion_identity: children run {python}; stock THUNDER_OVERLAY=0, overlay THUNDER_OVERLAY=1")
    print(f"fusion_identity: device queries answered by {runtime}")
    for kind, reason in skipped.items():
        print(f"fusion_identity: SKIPPED every {kind} case: {reason}")

    cases, worst = [], EXIT_IDENTICAL
    import workloads as stock_workloads

    for name, config in [(w, c) for w in opts.workloads for c in (opts.distributed or [None])]:
        started = time.perf_counter()
        known_crash = stock_workloads.BY_NAME[name].stock_crash is not None
        results = (
            run_sides(python, env, name, opts.modes, kinds, opts.overlay_workloads, opts.timeout, config)
            if kinds
            else {}
        )
        label = f"{name}@{config}" if config else name
        for mode in opts.modes:
            for kind in opts.executors:
                case = Case(label, mode, kind)
                cases.append(case)
                if kind in skipped:
                    case.verdict = "skipped"
                    worst = worse(worst, EXIT_SKIPPED)
                    continue
                code = judge_sides(case, results, known_crash)
                worst = worse(worst, code)
        print(f"fusion_identity: {label} done in {time.perf_counter() - started:.0f} s", flush=True)

    print()
    print_table(cases)
    for case in cases:
        if case.details:
            print(f"\n{case.workload} / {case.mode} / {case.kind}: {case.verdict}")
            for d in case.details:
                print("  " + d.replace("\n", "\n    "))
    print()
    print(what_it_proves(runtime))
    for kind, reason in skipped.items():
        print(f"NOT compared: every {kind} case ({reason}).")
    summary = {
        EXIT_IDENTICAL: "identical wherever stock compiles",
        EXIT_DIFFERENT: "DIFFERENT (see above)",
        EXIT_SIDE_FAILED: "a side could not run (see above)",
        EXIT_SKIPPED: "cases SKIPPED, not compared",
    }
    print(f"\nfusion_identity: {summary[worst]} (exit {worst})")
    return worst


if __name__ == "__main__":
    sys.exit(main())
