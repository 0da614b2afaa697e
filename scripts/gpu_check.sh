#!/usr/bin/env bash
# One prepared command for a machine with an NVIDIA GPU and no network:
#
#   bash scripts/gpu_check.sh            # results and log under $OUT (default ./gpu_check_out)
#
# 1. finds the CUDA toolkit (CUDA_ROOT, else /usr/local/cuda, else from nvcc) and a
#    libcuda to link against (toolkit stubs, else the driver's libcuda.so.1);
# 2. installs PyCUDA offline: its pure-Python dependencies from the wheels in
#    third_party/pycuda, PyCUDA itself built from the sdist there (configure.py with
#    the CUDA root, no CURAND, parallel build_ext) into a private site directory;
#    if that build fails, falls back to scripts/pycuda_compat (the few PyCUDA calls
#    needle makes, over NVIDIA's cuda-bindings) and says so;
# 3. runs the CUDA tests (tests/codegen -k cuda: nvcc compile checks, emulation,
#    the runtime end to end and every generated-kernel case on the GPU);
# 4. runs benchmarks/bench_cuda.py (fused elementwise GB/s vs the device's copy
#    bandwidth, matmul GFLOP/s for 1024/2048/4096, softmax, MLP step time) and
#    `python -m needle compare --device cuda --quick`;
# all within about 8 minutes (BUDGET seconds; each step is cut to what is left).  Needs python3 with
# numpy (and pytest, llvmlite, networkx for the tests), nvcc and g++.
set -uo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
OUT="${OUT:-$ROOT/gpu_check_out}"
mkdir -p "$OUT"
exec > >(tee "$OUT/gpu_check.log") 2>&1
PY="${PYTHON:-python3}"
WORK="${TMPDIR:-/tmp}/needle-gpu-check"
SITE="$WORK/site"
JOBS="$(nproc 2>/dev/null || echo 4)"
export PYTHONUNBUFFERED=1 NEEDLE_CACHE_DIR="$WORK/cache"
START=$(date +%s)
SUMMARY=()
BUDGET="${BUDGET:-470}"  # seconds for the whole check (8 minutes, a little slack kept)
step() { echo; echo "== [$(( $(date +%s) - START ))s] $*"; }
# seconds a step may take: at most $1, and no more than what is left of the budget
limit() { local left=$(( BUDGET - ($(date +%s) - START) )); [ "$left" -lt "$1" ] && echo $(( left > 10 ? left : 10 )) || echo "$1"; }
note() { SUMMARY+=("$*"); echo "-- $*"; }

step "machine"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>&1 || echo "nvidia-smi failed"
"$PY" --version
"$PY" -c "import numpy; print('numpy', numpy.__version__)" || { echo "numpy is missing: cannot continue"; exit 2; }

step "CUDA toolkit"
CUDA_ROOT="${CUDA_ROOT:-}"
if [ -z "$CUDA_ROOT" ]; then
  for c in /usr/local/cuda "$(dirname "$(dirname "$(readlink -f "$(command -v nvcc 2>/dev/null || echo /x/x/x)")")")"; do
    if [ -f "$c/include/cuda.h" ]; then CUDA_ROOT="$c"; break; fi
  done
fi
[ -n "$CUDA_ROOT" ] || { echo "no CUDA toolkit (cuda.h) found; set CUDA_ROOT"; exit 2; }
export CUDA_ROOT PATH="$CUDA_ROOT/bin:$PATH"
echo "CUDA_ROOT=$CUDA_ROOT"; nvcc --version | tail -2

LIBCUDA_DIR=""
for d in "$CUDA_ROOT/lib64/stubs" "$CUDA_ROOT/targets/x86_64-linux/lib/stubs" "$CUDA_ROOT/lib/stubs"; do
  if [ -f "$d/libcuda.so" ]; then LIBCUDA_DIR="$d"; break; fi
done
if [ -z "$LIBCUDA_DIR" ]; then
  lib="$(ldconfig -p 2>/dev/null | awk '/libcuda\.so\.1 .*x86-64/ {print $NF; exit}')"
  for c in "$lib" /usr/local/nvidia/lib64/libcuda.so.1 /usr/lib/x86_64-linux-gnu/libcuda.so.1 /usr/lib64/libcuda.so.1; do
    if [ -n "$c" ] && [ -e "$c" ]; then
      mkdir -p "$WORK/libcuda" && ln -sf "$c" "$WORK/libcuda/libcuda.so" && LIBCUDA_DIR="$WORK/libcuda"; break
    fi
  done
fi
echo "libcuda for linking: ${LIBCUDA_DIR:-none found}"

step "PyCUDA (offline)"
mkdir -p "$SITE"
"$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$SITE" \
  third_party/pycuda/*.whl || echo "pip could not install the vendored wheels"
export PYTHONPATH="$SITE:$ROOT${PYTHONPATH:+:$PYTHONPATH}"
if "$PY" -c "import pycuda.driver" 2>/dev/null; then
  note "PyCUDA: already importable"
else
  rm -rf "$WORK/src" && mkdir -p "$WORK/src"
  tar xzf third_party/pycuda/pycuda-*.tar.gz -C "$WORK/src"
  SRC="$(ls -d "$WORK"/src/pycuda-*)"
  if ( cd "$SRC" \
       && "$PY" configure.py --cuda-root="$CUDA_ROOT" --no-cuda-enable-curand \
            ${LIBCUDA_DIR:+--cudadrv-lib-dir="$LIBCUDA_DIR"} \
       && timeout "$(limit 200)" "$PY" setup.py -q build_ext --inplace -j "$JOBS" > "$WORK/pycuda-build.log" 2>&1 \
       && cp -r pycuda "$SITE/" ) && "$PY" -c "import pycuda.driver"; then
    note "PyCUDA: built from third_party/pycuda/$(basename "$SRC").tar.gz in $(( $(date +%s) - START ))s"
  else
    tail -30 "$WORK/pycuda-build.log" 2>/dev/null
    cp "$WORK/pycuda-build.log" "$OUT/" 2>/dev/null
    rm -rf "$SITE/pycuda"
    if "$PY" -c "from cuda.bindings import driver" 2>/dev/null || "$PY" -c "from cuda import cuda" 2>/dev/null; then
      export PYTHONPATH="$ROOT/scripts/pycuda_compat:$PYTHONPATH"
      note "PyCUDA: the build or its import FAILED (log in pycuda-build.log); using scripts/pycuda_compat over cuda-bindings"
    else
      note "PyCUDA: the build or its import FAILED and cuda-bindings is missing: no CUDA runtime"
    fi
  fi
fi
"$PY" - <<'EOF'
import needle
from needle.runtime import cuda
ok, why = cuda.available()
print("needle.cuda().enabled():", needle.cuda().enabled(), why)
if ok:
    print("device:", cuda.describe())
EOF

step "CUDA tests"
timeout "$(limit 180)" "$PY" -m pytest -q -p no:cacheprovider tests/codegen -k cuda -rs --durations=8 \
  --junitxml="$OUT/cuda_tests.xml"
rc=$?; note "CUDA tests: pytest exit code $rc (0 = all passed)"

step "benchmarks"
timeout "$(limit 120)" "$PY" benchmarks/bench_cuda.py --json "$OUT/bench_cuda.json"
rc=$?; note "bench_cuda.py: exit code $rc"
if "$PY" -m needle compare --help >/dev/null 2>&1; then
  timeout "$(limit 120)" "$PY" -m needle compare --device cuda --quick --json "$OUT/compare_cuda.json"
  rc=$?; note "needle compare --device cuda --quick: exit code $rc"
fi

step "summary"
printf '%s\n' "${SUMMARY[@]}" | tee "$OUT/summary.txt"
echo "total $(( $(date +%s) - START ))s"
