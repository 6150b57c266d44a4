#!/usr/bin/env bash
# Every built-in op's tritonkit bench in one device call, recorded: the memory-bound ops (rms_norm with and
# without residual, silu_and_mul, rotary_embedding, reshape_and_cache) and paged_attention (decode at 4K and 32K
# keys, causal prompts, a mixed batch), bf16, Llama-3-8B dims, num_tokens 1..65536, providers tritonkit / eager /
# inductor / vllm / sdpa where each applies, ceilings measured in the same run.
#
#   usage, through the device tool (carry .peers for vLLM's kernels: shared/peers/vllm-triton-kernels.sh .peers):
#     bash benchmarks/gpu/bench_all.sh                          every op, every point
#     bash benchmarks/gpu/bench_all.sh quick                    4 points per op: try this first
#     bash benchmarks/gpu/bench_all.sh attention                paged_attention over every series (decode at 1K..128K
#                                                               keys, causal and chunked prefill, speculative
#                                                               decoding at 4K and 32K keys, the mixed batch),
#                                                               num_tokens 1..16384, beside vLLM and SDPA
#     bash benchmarks/gpu/bench_all.sh moe                      fused_moe over Mixtral, Qwen3-30B-A3B, DeepSeek-V3
#                                                               (fp8 block-128), num_tokens 1..16384, beside vLLM's
#                                                               two fused-MoE GEMMs alone (carry .peers from
#                                                               vllm-fused-moe.sh too); under 5 minutes
#     bash benchmarks/gpu/bench_all.sh moe-routing              topk_softmax and moe_align_block_size, 5 points
#     BENCH_OPS="paged_attention" bash benchmarks/gpu/bench_all.sh   a subset (the whole set takes two calls)
#
# Writes into $OUT (default out/bench_all): bench.json, one PNG per op and log.txt (the console; at most 8 files,
# what the device tool returns). The summary table is printed last. Past --deadline only tritonkit is timed;
# bench.json is rewritten after every op, so a stopped run still returns what it measured. To publish, here:
#   tritonkit bench --record benchmarks/results/h200 --from <returned folder>/bench.json
# and commit the table and latest/ with the command in the commit body.
set -u
cd "$(dirname "$0")/../.."
OUT=${OUT:-out/bench_all}
mkdir -p "$OUT"
export PYTHONPATH="src:.peers${PYTHONPATH:+:$PYTHONPATH}"
# the device machine starts bare: a fresh cache dir per run, so the ceilings are measured on this card now
export TRITONKIT_CACHE_DIR="${TRITONKIT_CACHE_DIR:-$OUT/.cache}"

OPS=${BENCH_OPS:-"rms_norm rms_norm:residual=0 silu_and_mul rotary_embedding reshape_and_cache paged_attention"}
TOKENS=${BENCH_TOKENS:-"1 2 4 8 16 32 64 128 256 512 1024 2048 4096 8192 16384 32768 65536"}
DEADLINE=${BENCH_DEADLINE:-430}
LIMIT=${BENCH_LIMIT:-560}
MODELS=${BENCH_MODELS:-"llama3-8b"}
# paged_attention's published series (the README's table); the attention mode sweeps all of them
SERIES=${BENCH_SERIES:-"decode 4K keys|decode 32K keys|prefill causal|mixed: prompt + 64 decode at 4K"}
if [ "${1:-}" = "attention" ]; then
  OPS=${BENCH_OPS:-"paged_attention"}
  TOKENS=${BENCH_TOKENS:-"1 2 4 8 16 32 64 128 256 512 1024 2048 4096 8192 16384"}
  SERIES=${BENCH_SERIES:-"decode 1K keys|decode 4K keys|decode 8K keys|decode 32K keys|decode 128K keys|prefill causal|chunked prefill to 16K keys|speculative 4 tokens at 4K keys|speculative 4 tokens at 32K keys|mixed: prompt + 64 decode at 4K"}
fi
PROVIDERS=${BENCH_PROVIDERS:-"tritonkit eager inductor vllm sdpa"}
if [ "${1:-}" = "moe" ]; then
  # fused_moe first, beside vLLM's two GEMMs alone (its eager reference is a per-expert Python loop, no peer);
  # the router ops, whose Inductor peer compiles once per point, in a second run if time is left (moe-routing)
  OPS=${BENCH_OPS:-"fused_moe"}
  MODELS=${BENCH_MODELS:-"mixtral-8x7b qwen3-30b-a3b deepseek-v3"}
  TOKENS=${BENCH_TOKENS:-"1 2 4 8 16 32 64 128 256 512 1024 2048 4096 8192 16384"}
  PROVIDERS=${BENCH_PROVIDERS:-"tritonkit vllm"}
  DEADLINE=${BENCH_DEADLINE:-280}
  LIMIT=${BENCH_LIMIT:-300}
fi
if [ "${1:-}" = "moe-routing" ]; then
  OPS=${BENCH_OPS:-"topk_softmax moe_align_block_size"}
  MODELS=${BENCH_MODELS:-"mixtral-8x7b qwen3-30b-a3b deepseek-v3"}
  TOKENS=${BENCH_TOKENS:-"1 16 256 4096 16384"}
fi
if [ "${1:-}" = "quick" ]; then
  TOKENS="1 256 4096 16384"
  DEADLINE=${BENCH_DEADLINE:-200}
fi

{
  echo "== $(date -u +%FT%TZ) bench_all ${1:-full}"
  nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu,power.draw,utilization.gpu \
    --format=csv 2>&1 || true
  python3 -c 'import torch, triton, sys; print("python", sys.version.split()[0], "torch", torch.__version__,
"triton", triton.__version__, "cuda", torch.version.cuda)'
  python3 -c 'import vllm.v1.attention.ops.triton_unified_attention as m; print("vllm kernels:", m.__file__)' \
    2>&1 | tail -1
} 2>&1 | tee "$OUT/log.txt"

IFS='|' read -r -a SERIES_ARGS <<< "$SERIES"
# shellcheck disable=SC2086
timeout -k 10 "$LIMIT" python3 -m tritonkit bench $OPS --models $MODELS --dtype bfloat16 --num-tokens $TOKENS \
  --series "${SERIES_ARGS[@]}" \
  --providers $PROVIDERS --out "$OUT" --deadline "$DEADLINE" 2>&1 | tee -a "$OUT/log.txt"
rc=${PIPESTATUS[0]}
rm -rf "$OUT/.cache"
echo "bench_all: tritonkit bench exited $rc; files in $OUT: $(ls "$OUT" | tr '\n' ' ')"
exit "$rc"
