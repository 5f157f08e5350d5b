#!/usr/bin/env bash
# One command for a newcomer: creates .venv with torch==2.9.1, lightning-thunder==0.2.6 and this project
# installed, then runs the main job, `thunder-overlay verify`.
# Any CPython 3.10-3.13 works (thunder 0.2.x supports these); 3.11 is preferred, then 3.12, 3.13, 3.10.
# PYTHON=/path/to/python picks one. nvFuser wheels (GPU benchmarks) exist for CPython 3.12 only.
# Re-running is quick: an existing .venv is reused and satisfied requirements are skipped.
# SETUP_ONLY=1 skips the verify run.
set -euo pipefail
cd "$(dirname "$0")"

supported() {  # runs the candidate (a version manager's shim may exist without a working interpreter)
  "$1" -c 'import sys; sys.exit(not (3, 10) <= sys.version_info[:2] <= (3, 13))' 2>/dev/null
}

python=${PYTHON:-}
if [ -n "$python" ]; then
  if ! supported "$python"; then
    echo "setup.sh: PYTHON=$python is not a working CPython 3.10-3.13" >&2
    exit 1
  fi
elif [ ! -x .venv/bin/python ]; then
  for candidate in python3.11 python3.12 python3.13 python3.10 python3; do
    if command -v "$candidate" >/dev/null && supported "$candidate"; then
      python=$candidate; break
    fi
  done
  if [ -z "$python" ]; then
    echo "setup.sh: no CPython 3.10-3.13 found (3.11 preferred; set PYTHON=/path/to/python3.11)" >&2
    exit 1
  fi
fi

if [ ! -x .venv/bin/python ]; then
  echo "setup.sh: creating .venv with $("$python" --version) ($(command -v "$python"))"
  echo "setup.sh: (nvFuser wheels for the GPU benchmarks need CPython 3.12; everything else runs on 3.10-3.13)"
  "$python" -m venv .venv
else
  echo "setup.sh: reusing .venv ($(.venv/bin/python --version))"
fi
echo "setup.sh: installing requirements (torch==2.9.1 is about 7 GB the first time)"
.venv/bin/python -m pip install -q --disable-pip-version-check -r requirements-dev.txt
.venv/bin/python -m pip install -q --disable-pip-version-check --no-deps -e .
.venv/bin/thunder-overlay status
if [ "${SETUP_ONLY:-0}" != "1" ]; then
  .venv/bin/thunder-overlay verify
fi
