"""Build bench/cudart_standin.c into a cache folder, for the fusion-identity check's child processes.

The stand-in is compiled with gcc against the CUDA runtime headers of the environment that will load
it (the ``nvidia-cuda-runtime`` wheel's ``nvidia/cuda_runtime/include`` and triton's copy of the CUDA
headers), and is cached under a hash of the source and the headers' paths.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
from pathlib import Path

SOURCE = Path(__file__).with_name("cudart_standin.c")
DEFAULT_CACHE = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "thunder-overlay" / "cudart-standin"

_FIND_HEADERS = """
import importlib.util, json, os
def package_dir(name):
    spec = importlib.util.find_spec(name)
    return list(spec.submodule_search_locations)[0] if spec and spec.submodule_search_locations else None
cudart, triton = package_dir("nvidia.cuda_runtime"), package_dir("triton")
print(json.dumps([os.path.join(cudart, "include") if cudart else None,
                  os.path.join(triton, "backends", "nvidia", "include") if triton else None]))
"""


class StandinUnavailable(RuntimeError):
    pass


def real_driver() -> str | None:
    """What shows that this machine has an NVIDIA driver (a device node, or a loadable libcuda), or None."""
    import ctypes

    for node in ("/dev/nvidiactl", "/dev/nvidia0"):
        if os.path.exists(node):
            return node
    try:
        ctypes.CDLL("libcuda.so.1")
    except OSError:
        return None
    return "libcuda.so.1"


def header_dirs(python: str) -> list[str]:
    proc = subprocess.run([python, "-c", _FIND_HEADERS], capture_output=True, text=True)
    if proc.returncode != 0:
        raise StandinUnavailable(f"could not look up the CUDA headers with {python}: {proc.stderr[-500:]}")
    found = [d for d in json.loads(proc.stdout) if d and Path(d, "cuda_runtime_api.h").is_file()]
    if not found:
        raise StandinUnavailable(
            f"no CUDA runtime headers in {python}'s environment (the nvidia-cuda-runtime wheel, or triton's copy)"
        )
    return found


def build(python: str, cache_dir: Path | None = None) -> Path:
    """Path of the built stand-in for ``python``'s environment (built once, then reused)."""
    gcc = shutil.which("gcc")
    if gcc is None:
        raise StandinUnavailable("gcc is not installed; it builds the CUDA-runtime stand-in")
    includes = header_dirs(python)
    key = hashlib.sha256(SOURCE.read_bytes() + "\0".join(includes).encode()).hexdigest()[:16]
    target = Path(cache_dir or DEFAULT_CACHE) / key / "libcudart_standin.so"
    if target.is_file():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_suffix(f".so.{os.getpid()}")
    cmd = [
        gcc,
        "-shared",
        "-fPIC",
        "-O2",
        "-Wall",
        "-Werror",
        *(f"-I{d}" for d in includes),
        str(SOURCE),
        "-o",
        str(partial),
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise StandinUnavailable(f"gcc failed building {SOURCE.name}:\n{proc.stderr[-2000:]}")
    partial.replace(target)  # atomic: concurrent checks never load a half-written file
    return target
