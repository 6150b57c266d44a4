#!/usr/bin/env bash
# Correctness of the whole tree on the H200 in one device call:
#   1. tritonkit validate: every op x boundary shapes x fp16/bf16/fp32 x every input family; large (>2^31) in bf16
#   2. the GPU-only tests (tests/ops: graph capture, torch.compile, one compile per config; tests/bench; tests/tune)
#   3. compute-sanitizer memcheck over a bf16 validation pass of every op; racecheck over the ops whose kernels
#      use shared memory (paged_attention's and fused_moe's dots and reductions, rms_norm's reduction, the
#      expert ops' histograms, scans and top-k reductions)
#   4. host time per eager call, cached launcher on/off and Inductor (benchmarks/gpu/host_overhead.py)
# Timings are tritonkit bench's (benchmarks/gpu/bench_all.sh), not this script's.
# usage (repository root): TRITONKIT_GIT_SHA=<sha> bash benchmarks/gpu/final_check.sh
# OPS="paged_attention" limits steps 1 and 3 to those ops and skips step 4 (after a change to those ops only)
set -uo pipefail
export PYTHONPATH=$PWD/src:$PWD/.peers${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
step() { echo "== $* ($(date +%T))"; }
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__, 'cuda', torch.version.cuda)"
rc=0
OPS=${OPS:-}
RACE_OPS="paged_attention rms_norm fused_moe moe_align_block_size topk_softmax"
[ -n "$OPS" ] && RACE_OPS=$(for o in $RACE_OPS; do [[ " $OPS " == *" $o "* ]] && echo -n "$o "; done)
step validate boundary $OPS
timeout 200 python3 -m tritonkit validate $OPS --json "$OUT/validate_boundary.json" --quiet 2>/dev/null | tail -3 || rc=1
step validate large $OPS
timeout 100 python3 -m tritonkit validate $OPS --shapes large --dtype bfloat16 --json "$OUT/validate_large.json" \
  2>/dev/null | tail -3 || rc=1
step pytest gpu
# four workers share the card (tests/gpu_share.py: the gpu_alone tests have it to themselves); serial, the suite
# outruns this timeout
X=$(python3 -c "import xdist" 2>/dev/null && echo "-n 4 --dist loadfile")
timeout 300 python3 -m pytest -q -m gpu $X tests/ops tests/bench tests/tune -p no:cacheprovider 2>&1 | tail -6 || rc=1
SAN=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
step sanitizer memcheck
# the caching allocator would hide out-of-bounds accesses inside its pools
PYTORCH_NO_CUDA_MEMORY_CACHING=1 timeout 150 "$SAN" --tool memcheck --print-limit 20 --error-exitcode 3 \
  python3 -m tritonkit validate $OPS --dtype bfloat16 --families randn --quiet > "$OUT/sanitizer_memcheck.log" 2>&1
echo "memcheck exit $?: $(grep -E 'ERROR SUMMARY|passed, ' "$OUT/sanitizer_memcheck.log" | tr '\n' ' ')"
# (no op names would validate every op: skip the step when OPS names none of the shared-memory ones)
if [ -n "${RACE_OPS// /}" ]; then
  step sanitizer racecheck $RACE_OPS
  PYTORCH_NO_CUDA_MEMORY_CACHING=1 timeout 120 "$SAN" --tool racecheck --print-limit 20 --error-exitcode 3 \
    python3 -m tritonkit validate $RACE_OPS --dtype bfloat16 --families randn --quiet \
    > "$OUT/sanitizer_racecheck.log" 2>&1
  echo "racecheck exit $?: $(grep -E 'RACECHECK SUMMARY|passed, ' "$OUT/sanitizer_racecheck.log" | tr '\n' ' ')"
fi
if [ -z "$OPS" ]; then
  step host overhead
  timeout 90 python3 benchmarks/gpu/host_overhead.py --inductor 2>&1 | grep -v Warn | tail -14 | tee "$OUT/host_overhead.txt"
fi
exit $rc
