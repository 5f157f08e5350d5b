#!/usr/bin/env bash
# One command for the nvFuser environment: .venv312 (CPython 3.12, the only Python nvFuser wheels exist for)
# beside .venv, with torch==2.9.1, lightning-thunder==0.2.6, the nvFuser wheel built for the installed torch,
# this project (editable) and the dev requirements. Used by bench/fusion_identity.py and by .ci/run.
# The interpreter comes from $PYTHON312, else python3.12 on PATH, else pyenv (PYENV_VERSION=3.12.1).
# NVFUSER_VENV=DIR builds (or reuses) that environment instead of .venv312; TORCH_VERSION=2.10.0 installs that
# torch instead of requirements-dev.txt's pin. The nvFuser wheel follows the torch the environment ends up with:
# torch 2.9 -> nvfuser-cu128-torch29, torch 2.10 -> nvfuser-cu128-torch210 (no other torch has a wheel).
#   TORCH_VERSION=2.10.0 NVFUSER_VENV=/work/envs/torch2.10-py3.12 bench/setup-nvfuser.sh
# Re-running reuses the environment and skips satisfied requirements.
# Exit codes: 0 ready; 3 no CPython 3.12 found; 4 no nvFuser wheel for this torch, or it could not be installed.
set -euo pipefail
cd "$(dirname "$0")/.."

venv=${NVFUSER_VENV:-.venv312}
is_312() { "$1" -c 'import sys; sys.exit(sys.version_info[:2] != (3, 12))' 2>/dev/null; }

python=${PYTHON312:-}
if [ -n "$python" ] && ! is_312 "$python"; then
  echo "setup-nvfuser.sh: PYTHON312=$python is not a working CPython 3.12" >&2
  exit 3
fi
if [ -z "$python" ] && [ ! -x "$venv"/bin/python ]; then
  if command -v python3.12 >/dev/null && is_312 python3.12; then
    python=python3.12
  elif command -v pyenv >/dev/null; then
    candidate=$(PYENV_VERSION=${PYENV_VERSION_312:-3.12.1} pyenv which python3 2>/dev/null || true)
    if [ -n "$candidate" ] && is_312 "$candidate"; then python=$candidate; fi
  fi
  if [ -z "$python" ]; then
    echo "setup-nvfuser.sh: no CPython 3.12 (set PYTHON312=/path/to/python3.12); nvFuser wheels need 3.12" >&2
    exit 3
  fi
fi

if [ ! -x "$venv"/bin/python ]; then
  echo "setup-nvfuser.sh: creating $venv with $("$python" --version) ($(command -v "$python"))"
  "$python" -m venv "$venv"
else
  echo "setup-nvfuser.sh: reusing $venv ($("$venv"/bin/python --version))"
fi
pip=("$venv"/bin/python -m pip install -q --disable-pip-version-check)
echo "setup-nvfuser.sh: installing torch, thunder, nvFuser and the dev requirements (about 7 GB the first time)"
if [ -n "${TORCH_VERSION:-}" ]; then
  requirements=$(mktemp)
  trap 'rm -f "$requirements"' EXIT
  grep -v '^torch==' requirements-dev.txt > "$requirements"
  "${pip[@]}" -r "$requirements" "torch==$TORCH_VERSION"
else
  "${pip[@]}" -r requirements-dev.txt
fi
torch_minor=$("$venv"/bin/python -c 'import torch; print("".join(torch.__version__.split("+")[0].split(".")[:2]))')
case "$torch_minor" in
  29|210) wheel=nvfuser-cu128-torch$torch_minor ;;
  *) echo "setup-nvfuser.sh: no nvFuser wheel is built for torch $("$venv"/bin/python -c 'import torch; print(torch.__version__)') (only torch 2.9 and 2.10)" >&2
     exit 4 ;;
esac
echo "setup-nvfuser.sh: torch $torch_minor -> $wheel"
if ! "${pip[@]}" "$wheel"; then
  echo "setup-nvfuser.sh: the $wheel wheel could not be installed" >&2
  exit 4
fi
"${pip[@]}" --no-deps -e .
# nvfuser_direct (what thunder uses) queries the CUDA runtime when imported: look it up, do not import it here
"$venv"/bin/python - "$wheel" <<'PY'
import importlib.metadata, importlib.util, sys, torch, thunder
assert importlib.util.find_spec("nvfuser_direct"), "the nvFuser wheel installed no nvfuser_direct"
print("setup-nvfuser.sh: ready: torch", torch.__version__, "thunder", thunder.__version__, "nvfuser",
      importlib.metadata.version(sys.argv[1]))
PY
