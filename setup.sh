#!/usr/bin/env bash
# One command for a newcomer: creates .venv (Python 3.11) with torch==2.9.1, lightning-thunder==0.2.6
# and this project installed, then runs the main job, `thunder-overlay verify`.
# Re-running is quick: an existing .venv is reused and satisfied requirements are skipped.
# SETUP_ONLY=1 skips the verify run.
set -euo pipefail
cd "$(dirname "$0")"

python=${PYTHON:-}
if [ -z "$python" ]; then
  for candidate in python3.11 python3; do
    if command -v "$candidate" >/dev/null && "$candidate" -c 'import sys; sys.exit(sys.version_info[:2] != (3, 11))'; then
      python=$candidate; break
    fi
  done
fi
if [ -z "$python" ]; then
  echo "setup.sh: Python 3.11 is required (set PYTHON=/path/to/python3.11)" >&2
  exit 1
fi

if [ ! -x .venv/bin/python ]; then
  echo "setup.sh: creating .venv with $("$python" --version)"
  "$python" -m venv .venv
fi
echo "setup.sh: installing requirements (torch==2.9.1 is about 7 GB the first time)"
.venv/bin/python -m pip install -q --disable-pip-version-check -r requirements-dev.txt
.venv/bin/python -m pip install -q --disable-pip-version-check --no-deps -e .
.venv/bin/thunder-overlay status
if [ "${SETUP_ONLY:-0}" != "1" ]; then
  .venv/bin/thunder-overlay verify
fi
