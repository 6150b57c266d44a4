#!/usr/bin/env bash
# Issue 2 on the H200 in one call: environment, full validation (boundary + sweep sample + large), compute-sanitizer
# (memcheck, racecheck) over a validation pass, and a quick speed probe. Results land in $OUT.
#   usage: bash benchmarks/gpu/foundation.sh [OP ...]
set -uo pipefail
export PYTHONPATH=$PWD/src${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__, 'cuda', torch.version.cuda)"
which compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer
rc=0
python3 -m tritonkit validate "$@" --json "$OUT/validate_boundary.json" --quiet || rc=1
python3 -m tritonkit validate "$@" --shapes large --json "$OUT/validate_large.json" || rc=1
# sanitizer: the caching allocator would hide out-of-bounds accesses inside its pools
SAN=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
for tool in memcheck racecheck; do
  PYTORCH_NO_CUDA_MEMORY_CACHING=1 timeout 300 "$SAN" --tool $tool --print-limit 20 --error-exitcode 3 \
    python3 -m tritonkit validate "$@" --dtype bfloat16 --families randn --quiet > "$OUT/sanitizer_$tool.log" 2>&1
  echo "compute-sanitizer $tool exit $?: $(grep -E 'ERROR SUMMARY|passed, ' "$OUT/sanitizer_$tool.log" | tr '\n' ' ')"
done
python3 benchmarks/gpu/quick_speed.py "$@" || rc=1
exit $rc
