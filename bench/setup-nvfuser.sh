#!/usr/bin/env bash
# One command for the nvFuser environment: .venv312 (CPython 3.12, the only Python nvFuser wheels exist for)
# beside .venv, with torch==2.9.1, lightning-thunder==0.2.6, nvfuser-cu128-torch29, this project (editable)
# and the dev requirements. Used by bench/fusion_identity.py and by .ci/run.
# The interpreter comes from $PYTHON312, else python3.12 on PATH, else pyenv (PYENV_VERSION=3.12.1).
# Re-running reuses .venv312 and skips satisfied requirements.
# Exit codes: 0 ready; 3 no CPython 3.12 found; 4 the nvFuser wheel could not be installed.
set -euo pipefail
cd "$(dirname "$0")/.."

is_312() { "$1" -c 'import sys; sys.exit(sys.version_info[:2] != (3, 12))' 2>/dev/null; }

python=${PYTHON312:-}
if [ -n "$python" ] && ! is_312 "$python"; then
  echo "setup-nvfuser.sh: PYTHON312=$python is not a working CPython 3.12" >&2
  exit 3
fi
if [ -z "$python" ] && [ ! -x .venv312/bin/python ]; then
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

if [ ! -x .venv312/bin/python ]; then
  echo "setup-nvfuser.sh: creating .venv312 with $("$python" --version) ($(command -v "$python"))"
  "$python" -m venv .venv312
else
  echo "setup-nvfuser.sh: reusing .venv312 ($(.venv312/bin/python --version))"
fi
pip=(.venv312/bin/python -m pip install -q --disable-pip-version-check)
echo "setup-nvfuser.sh: installing torch, thunder, nvFuser and the dev requirements (about 7 GB the first time)"
"${pip[@]}" -r requirements-dev.txt
if ! "${pip[@]}" nvfuser-cu128-torch29; then
  echo "setup-nvfuser.sh: the nvfuser-cu128-torch29 wheel could not be installed" >&2
  exit 4
fi
"${pip[@]}" --no-deps -e .
.venv312/bin/python -c 'import torch, thunder, nvfuser; print("setup-nvfuser.sh: ready:", "torch", torch.__version__, "thunder", thunder.__version__, "nvfuser", nvfuser.version())'
