#!/usr/bin/env bash
# CUDA benchmarks, stock vs overlay, on a GPU machine without network:
#     bench/gpu.sh OUT_DIR [more compare.py options, e.g. --quick or -k "cuda and not chain-10000"]
#
# Installs every wheel in bench/wheels/ (or $WHEELS) with --no-index --no-deps into a venv
# ($BENCH_VENV, default /tmp/thunder-bench-venv) layered over $PYTHON's site-packages (torch,
# pytest, pytest-benchmark come from there), then runs `compare.py -k cuda` (cuda-torch and
# cuda-nvfuser cases) for $PAIRS pairs (default 1).  OUT_DIR gets the JSON, logs, env.txt and
# summary.txt.  Carry as wheels what that machine lacks, e.g. lightning_thunder-0.2.6 (pure
# Python) with dill, looseversion, optree (cp312), litgpt-0.5.0 + jsonargparse==4.32.1 for the
# litgpt workloads, and the overlay itself (`pip wheel --no-deps . -w bench/wheels`).
# nvFuser: its wheels are for CPython 3.12 only and built per torch (and CUDA) version, e.g.
# nvfuser-cu130-torch210 for torch 2.10; with no wheel matching the machine's torch (none for
# torch 2.11 so far), the cuda-nvfuser cases skip with the reason the preflight (bench/nvfuser_stack.py)
# prints first: a wheel for another torch, or one without the module thunder imports at fusion calls
# (thunder 0.2.6 needs the legacy `nvfuser`, which the 0.2.36 wheels no longer ship).
# Before the timings, bench/fusion_identity.py runs with the real CUDA runtime (stock vs overlay hand
# the executors the same traces and nvFuser FusionDefinitions; OUT_DIR/fusion_identity.txt). The
# timings run whatever it finds; gpu.sh then exits with 1 if it found a difference or a side failed.
set -u
OUT=${1:?usage: bench/gpu.sh OUT_DIR [compare.py options]}
shift
HERE=$(cd "$(dirname "$0")" && pwd)
PY=${PYTHON:-python3}
VENV=${BENCH_VENV:-/tmp/thunder-bench-venv}
mkdir -p "$OUT" && OUT=$(cd "$OUT" && pwd)

# a venv whose site-packages also loads the base interpreter's (even when that one is a venv itself)
"$PY" -m venv --without-pip "$VENV" || exit 1
VPY="$VENV/bin/python"
SITE=$("$VPY" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
"$PY" -c 'import site; print("".join(f"import site; site.addsitedir({p!r})\n" for p in site.getsitepackages()))' \
    >"$SITE/_bench_base_site.pth"

shopt -s nullglob
wheels=("${WHEELS:-$HERE/wheels}"/*.whl)
if ((${#wheels[@]})); then
    "$PY" -m pip install --no-index --no-deps --upgrade --compile --target "$SITE" "${wheels[@]}" >"$OUT/pip.log" 2>&1 \
        || { echo "pip install failed, see $OUT/pip.log"; exit 1; }
fi

"$VPY" - >"$OUT/env.txt" 2>&1 <<'EOF'
import sys, torch
print("python", sys.version.split()[0], "torch", torch.__version__, "cuda", torch.cuda.is_available())
import thunder
print("thunder", thunder.__version__, thunder.__file__)
from thunder.executors import nvfuser_available
print("nvfuser available", nvfuser_available())
try:
    import thunder_overlay
    print("overlay", thunder_overlay.status())
except ImportError as e:
    print("overlay absent:", e)
EOF
rc=$?
cat "$OUT/env.txt"
((rc == 0)) || { echo "thunder does not import here, see $OUT/env.txt"; exit 1; }

cd "$HERE/.." || exit 1
# Before spending GPU time: which nvFuser wheel is here and the torch it was built for, the module thunder
# imports at fusion calls, one tiny fusion against eager, and so which targets will run (exit 3: the
# cuda-nvfuser cases will skip, with the reason printed here; the others still run).
"$VPY" bench/nvfuser_stack.py --json "$OUT/preflight.json" 2>&1 | tee "$OUT/preflight.txt"
"$VPY" bench/fusion_identity.py --python "$VPY" --cache-dir "$OUT/standin" 2>&1 | tee "$OUT/fusion_identity.txt"
identity_rc=${PIPESTATUS[0]}

"$VPY" bench/compare.py --pairs "${PAIRS:-1}" -k cuda --out "$OUT" "$@"
rc=$?
# one file with everything a reader needs: the stack, what could run, the fusion check, the timings
{ echo "== stack and preflight"; cat "$OUT/env.txt" "$OUT/preflight.txt"
  echo; echo "== fusion identity"; tail -n 1 "$OUT/fusion_identity.txt"
  echo; echo "== timings (compare.py, exit $rc)"; cat "$OUT/summary.txt" 2>/dev/null; } >"$OUT/gpu-summary.txt"
echo "gpu.sh: summary in $OUT/gpu-summary.txt"
# 3: nvFuser cases skipped (no wheel for this torch); the torch-on-CUDA cases were still compared
if ((identity_rc == 1 || identity_rc == 2)); then
    echo "gpu.sh: fusion_identity.py exited $identity_rc, see $OUT/fusion_identity.txt"
    exit 1
fi
exit $rc
