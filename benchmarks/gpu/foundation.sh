#!/usr/bin/env bash
# Issue 2 on the H200 in one call: environment, full validation (boundary, then large in bf16), the GPU-only tests
# and compute-sanitizer (memcheck, racecheck) over a bf16 validation pass. Results in $OUT.
#   usage: bash benchmarks/gpu/foundation.sh [OP ...]
set -uo pipefail
export PYTHONPATH=$PWD/src${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
step() { echo "== $* ($(date +%T))"; }
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__, 'cuda', torch.version.cuda)"
rc=0
step validate boundary
timeout 240 python3 -m tritonkit validate "$@" --json "$OUT/validate_boundary.json" --quiet 2>/dev/null || rc=1
step validate large
timeout 200 python3 -m tritonkit validate "$@" --shapes large --dtype bfloat16 --json "$OUT/validate_large.json" \
  2>/dev/null | tail -40 || rc=1
step pytest gpu
timeout 150 python3 -m pytest -q -m gpu -x tests/ops -p no:cacheprovider 2>&1 | tail -15 || rc=1
SAN=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
for tool in memcheck racecheck; do
  step sanitizer $tool
  # the caching allocator would hide out-of-bounds accesses inside its pools
  PYTORCH_NO_CUDA_MEMORY_CACHING=1 timeout 150 "$SAN" --tool $tool --print-limit 20 --error-exitcode 3 \
    python3 -m tritonkit validate "$@" --dtype bfloat16 --families randn --quiet > "$OUT/sanitizer_$tool.log" 2>&1
  echo "compute-sanitizer $tool exit $?: $(grep -E 'ERROR SUMMARY|passed, ' "$OUT/sanitizer_$tool.log" | tr '\n' ' ')"
done
exit $rc
