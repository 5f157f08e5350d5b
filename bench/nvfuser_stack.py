"""What this machine's stack lets the nvFuser benchmark cases do, found before any timing (gpu.sh's preflight).

    python bench/nvfuser_stack.py [--json PATH]

Reports Python, torch and its CUDA, every installed nvFuser distribution with the torch it was built for
(read from its name, e.g. ``nvfuser-cu128-torch210`` -> torch 2.10, else from its ``torch`` requirement),
which nvFuser module thunder's executor imports at each fusion call (thunder 0.2.6: the legacy ``nvfuser``;
upstream main: ``nvfuser_direct``) and whether the wheel ships it, and, where CUDA is present, whether
thunder's nvFuser executor runs one tiny fusion and matches eager. Ends with which benchmark targets will
run and, for each that will not, why: ``targets.resolve`` skips the cuda-nvfuser cases with that reason.
Exit status 0 when the cuda-nvfuser cases can run, 3 when they cannot (the other targets may still run).
"""

from __future__ import annotations

import argparse
import importlib.metadata
import importlib.util
import json
import re
import sys
from pathlib import Path


def _torch_minor(version: str) -> str:
    return ".".join(version.split("+")[0].split(".")[:2])


def built_for(dist: importlib.metadata.Distribution) -> str | None:
    """The torch major.minor an nvFuser distribution was built for: from its name (``...-torch210``), else
    from a ``torch`` requirement pinned to one release."""
    name = dist.metadata["Name"] or ""
    found = re.search(r"torch(\d)(\d+)$", name.replace("_", "-"))
    if found:
        return f"{found.group(1)}.{found.group(2)}"
    for requirement in dist.requires or ():
        pinned = re.match(r"torch\s*==\s*(\d+\.\d+)", requirement)
        if pinned:
            return pinned.group(1)
    return None


def wheels() -> list[dict]:
    """Every installed nvFuser distribution: name, version, the torch it was built for, its top-level modules."""
    found, seen = [], set()
    for dist in importlib.metadata.distributions():
        name = dist.metadata["Name"] or ""
        if not name.lower().replace("_", "-").startswith("nvfuser") or name.lower() in seen:
            continue
        seen.add(name.lower())
        modules = sorted({Path(str(f)).parts[0] for f in dist.files or () if not str(f).startswith(name)
                          and ".dist-info" not in str(f)} - {".."})
        found.append({"name": name, "version": dist.version, "built_for_torch": built_for(dist), "modules": modules})
    return found


def thunder_needs() -> str | None:
    """The nvFuser module thunder's executor imports inside its functions, i.e. at fusion calls, read from its
    source (importing it imports nvFuser): thunder 0.2.6 imports the legacy ``nvfuser`` there
    (``compute_contiguity``); upstream main imports only at module level, ``nvfuser_direct`` first. None:
    no such import (or no thunder)."""
    import ast

    spec = importlib.util.find_spec("thunder")
    if spec is None or not spec.submodule_search_locations:
        return None
    impl = Path(list(spec.submodule_search_locations)[0]) / "executors" / "nvfuserex_impl.py"
    if not impl.is_file():
        return None
    for function in ast.walk(ast.parse(impl.read_text())):
        if isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef)):
            for node in ast.walk(function):
                if isinstance(node, ast.ImportFrom) and node.module in ("nvfuser", "nvfuser_direct"):
                    return node.module
                if isinstance(node, ast.Import) and node.names[0].name in ("nvfuser", "nvfuser_direct"):
                    return node.names[0].name
    return None


def problem(torch_version: str | None = None) -> str | None:
    """Why thunder's nvFuser executor cannot run here, whatever the device (None: nothing found against it)."""
    if torch_version is None:
        import torch

        torch_version = torch.__version__
    installed = wheels()
    if not installed:
        return f"no nvFuser wheel is installed (thunder needs one built for torch {_torch_minor(torch_version)})"
    for wheel in installed:
        if wheel["built_for_torch"] and wheel["built_for_torch"] != _torch_minor(torch_version):
            return (f"{wheel['name']} {wheel['version']} is built for torch {wheel['built_for_torch']}, and this is "
                    f"torch {torch_version}")
    needed = thunder_needs()
    if needed and importlib.util.find_spec(needed) is None:
        shipped = ", ".join(m for w in installed for m in w["modules"]) or "no module"
        return (f"thunder's nvFuser executor imports {needed} at every fusion call, and the installed nvFuser "
                f"({', '.join(w['name'] + ' ' + w['version'] for w in installed)}) ships {shipped}")
    return None


def runs_a_fusion() -> str | None:
    """Run one tiny fusion with thunder's nvFuser executor on CUDA and compare with eager; None when it
    matched, else why not."""
    import torch

    if not torch.cuda.is_available():
        return "no CUDA device"
    try:
        import thunder
        from thunder.executors import nvfuser_available

        if not nvfuser_available():
            return "thunder finds no usable nvFuser (thunder.executors.nvfuser_available() is False)"
        a, b = torch.randn(64, device="cuda"), torch.randn(64, device="cuda")
        fn = thunder.jit(lambda x, y: (x * y + 1).sin(), executors=["nvfuser"])
        out = fn(a, b)
        torch.cuda.synchronize()
    except Exception as e:
        return f"a tiny nvFuser fusion failed: {type(e).__name__}: {str(e).splitlines()[0][:200]}"
    if not torch.allclose(out, (a * b + 1).sin()):
        return "a tiny nvFuser fusion differs from eager"
    return None


def report() -> dict:
    import torch

    nvfuser_problem = problem(torch.__version__)
    cuda = torch.cuda.is_available()
    fusion = runs_a_fusion() if nvfuser_problem is None else None
    targets = {"cpu-torch": None, "cuda-torch": None if cuda else "no CUDA device",
               "cuda-nvfuser": nvfuser_problem or fusion}
    return {"python": sys.version.split()[0], "torch": torch.__version__, "torch_cuda": torch.version.cuda,
            "cuda_available": cuda, "device": torch.cuda.get_device_name(0) if cuda else None,
            "nvfuser_wheels": wheels(), "thunder_needs": thunder_needs(), "nvfuser_problem": nvfuser_problem,
            "tiny_fusion": fusion, "targets": targets}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", type=Path, help="also write the report as JSON")
    args = parser.parse_args(argv)
    facts = report()
    print(f"python {facts['python']}, torch {facts['torch']} (CUDA {facts['torch_cuda']}), "
          f"CUDA device: {facts['device'] or 'none'}")
    for wheel in facts["nvfuser_wheels"]:
        print(f"nvFuser wheel: {wheel['name']} {wheel['version']}, built for torch {wheel['built_for_torch'] or '?'}, "
              f"modules {', '.join(wheel['modules']) or 'none'}")
    if not facts["nvfuser_wheels"]:
        print("nvFuser wheel: none")
    print(f"thunder's nvFuser executor imports at fusion calls: {facts['thunder_needs'] or 'nothing'}")
    for target, why in facts["targets"].items():
        print(f"{target:13} {'runs' if why is None else 'skips: ' + why}")
    if args.json:
        args.json.write_text(json.dumps(facts, indent=1))
    return 0 if facts["targets"]["cuda-nvfuser"] is None else 3


if __name__ == "__main__":
    sys.exit(main())
