#!/usr/bin/env bash
# The same measurements under several Tritons on one card, for the README's support matrix (issue 35): host time
# per eager call (benchmarks/gpu/host_overhead.py: the fast launch path on and off, bit-identical outputs), kernel
# times of paged_attention and fused_moe (tritonkit bench, CUDA graphs), the fast path's GPU test and validation.
#
#   usage (device machine, repository root; a carried Triton unpacked as benchmarks/gpu/carry_triton.sh says, two
#   runs a Triton, or from ../shared/device/carry-triton.sh's three parts):
#     TRITONS="image /tmp/triton-3.8.0" bash benchmarks/gpu/triton_matrix.sh host kernels tests validate
#   TRITONS: "image" is the machine's own Triton; a folder is a carried one (imported with TRITON_BACKENDS_IN_TREE=1).
#   Steps: host (twice over the list, alternating, ~1 min a Triton), kernels (~2-3 min a Triton), tests, validate,
#   ab (environment switches A/B under each Triton: AB_SWITCHES, sets separated by "|", "base" for none, e.g.
#   AB_SWITCHES="base|TRITONKIT_PREFILL_HOPPER_EARLY_PAGES=1|TRITONKIT_PREFILL_HOPPER_STAGES=3"; AB_BENCH, the bench
#   arguments but the series, default paged_attention's Llama-3-8B points at 1024 and 16384 tokens; AB_SERIES, the
#   series separated by "|", default "prefill causal|chunked prefill to 16K keys"; ~20 s a set and Triton).
#   KERNEL_TOKENS / MOE_TOKENS / MOE_MODELS narrow the kernel points, KERNEL_OPS ("attn", "moe" or both, the
#   default) the ops, so that bench_all.sh's whole attention and moe grids fit a call each; KERNEL_TRITONS, TEST_TRITONS and
#   VALIDATE_TRITONS limit those steps to some of the Tritons (the host step always alternates all of them);
#   VALIDATE_OPS and VALIDATE_ARGS (e.g. "--dtype bfloat16") narrow validate.
#
# Everything lands in $OUT (default out/triton_matrix) as one archive, matrix.tgz (the device tool returns at most 8
# files), and a table comparing each Triton's times with the first one's is printed last. To record, here:
#   tritonkit bench --record benchmarks/results/h200 --from <unpacked>/attn-<tag>.json   (and moe-<tag>.json)
set -u
cd "$(dirname "$0")/../.."
OUT=${OUT:-out/triton_matrix}
W=$(mktemp -d)
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 TRITONKIT_CACHE_DIR=${TRITONKIT_CACHE_DIR:-/tmp/tritonkit-cache}
BASE_PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}"
TRITONS=${TRITONS:-image}
STEPS=${*:-host kernels}
KERNEL_TOKENS=${KERNEL_TOKENS:-"1 16 1024 2048 8192 16384"}
ATTN_SERIES=${ATTN_SERIES:-"decode 1K keys|decode 4K keys|prefill causal|chunked prefill to 16K keys|speculative 4 tokens at 4K keys"}
MOE_MODELS=${MOE_MODELS:-"mixtral-8x7b qwen3-30b-a3b deepseek-v3"}
MOE_TOKENS=${MOE_TOKENS:-"1 16 256 1024 4096 16384"}
IFS='|' read -r -a SERIES_ARGS <<< "$ATTN_SERIES"

# run a command under one Triton: "image" or a carried folder
under() {
  local t=$1
  shift
  if [ "$t" = image ]; then
    env PYTHONPATH="$BASE_PYTHONPATH" "$@"
  else
    env TRITON_BACKENDS_IN_TREE=1 PYTHONPATH="$t:$BASE_PYTHONPATH" \
      TRITON_PTXAS_BLACKWELL_PATH="$t/triton/backends/nvidia/bin/ptxas" "$@"
  fi
}
tag_of() { under "$1" python3 -c 'import triton; print(triton.__version__)'; }

nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader 2>&1 | tee "$W/log.txt"
declare -A TAG
for t in $TRITONS; do
  TAG[$t]=$(tag_of "$t") || { echo "Triton at $t does not import" | tee -a "$W/log.txt"; exit 2; }
  echo "triton $t -> ${TAG[$t]}" | tee -a "$W/log.txt"
done

for step in $STEPS; do
  case $step in
    host)
      for round in 1 2; do
        for t in $TRITONS; do
          echo "== host, round $round, Triton ${TAG[$t]} ($(date +%T))" | tee -a "$W/log.txt"
          under "$t" timeout 240 python3 benchmarks/gpu/host_overhead.py --torch-baseline \
            --json "$W/host-${TAG[$t]}-r$round.json" \
            2>&1 | tail -16 | tee -a "$W/log.txt"
        done
      done
      ;;
    kernels)
      for t in ${KERNEL_TRITONS:-$TRITONS}; do
        tag=${TAG[$t]}
        echo "== kernels, Triton $tag ($(date +%T))" | tee -a "$W/log.txt"
        if [[ " ${KERNEL_OPS:-attn moe} " == *" attn "* ]]; then
          # shellcheck disable=SC2086
          under "$t" timeout 300 python3 -m tritonkit bench paged_attention --models llama3-8b --dtype bfloat16 \
            --num-tokens $KERNEL_TOKENS --series "${SERIES_ARGS[@]}" --providers tritonkit --no-startup --no-plot \
            --no-copy-ref --out "$W/attn-$tag" 2>&1 | tail -4 | tee -a "$W/log.txt"
          cp "$W/attn-$tag/bench.json" "$W/attn-$tag.json" 2>/dev/null
        fi
        if [[ " ${KERNEL_OPS:-attn moe} " == *" moe "* ]]; then
          # shellcheck disable=SC2086
          under "$t" timeout 300 python3 -m tritonkit bench fused_moe --models $MOE_MODELS --dtype bfloat16 \
            --num-tokens $MOE_TOKENS --providers tritonkit --no-startup --no-plot --no-copy-ref --out "$W/moe-$tag" \
            2>&1 | tail -4 | tee -a "$W/log.txt"
          cp "$W/moe-$tag/bench.json" "$W/moe-$tag.json" 2>/dev/null
        fi
      done
      ;;
    tests)
      for t in ${TEST_TRITONS:-$TRITONS}; do
        echo "== GPU tests of the launch path, Triton ${TAG[$t]} ($(date +%T))" | tee -a "$W/log.txt"
        under "$t" timeout 240 python3 -m pytest -q -p no:cacheprovider tests/ops/test_launch.py \
          tests/test_triton_compat.py "tests/ops/test_gpu.py::test_paged_attention_repeats_a_layout_bit_exactly" \
          2>&1 | tail -3 | tee -a "$W/log.txt"
      done
      ;;
    validate)
      for t in ${VALIDATE_TRITONS:-$TRITONS}; do
        tag=${TAG[$t]}
        echo "== validate, Triton $tag ($(date +%T))" | tee -a "$W/log.txt"
        # shellcheck disable=SC2086
        under "$t" timeout 280 python3 -m tritonkit validate ${VALIDATE_OPS:-} ${VALIDATE_ARGS:-} \
          --json "$W/validate-$tag.json" --quiet 2>&1 | tail -3 | tee -a "$W/log.txt"
      done
      ;;
    ab)
      IFS='|' read -r -a AB_SETS <<< "${AB_SWITCHES:-base}"
      IFS='|' read -r -a AB_SERIES_ARGS <<< "${AB_SERIES:-prefill causal|chunked prefill to 16K keys}"
      for t in ${KERNEL_TRITONS:-$TRITONS}; do
        tag=${TAG[$t]}
        for i in "${!AB_SETS[@]}"; do
          envs=()
          read -r -a envs <<< "${AB_SETS[$i]}"  # the set's VAR=value words, spaces around them dropped
          [ "${envs[*]}" = base ] && envs=()
          echo "== ab, Triton $tag, set $i: ${envs[*]:-base} ($(date +%T))" | tee -a "$W/log.txt"
          # shellcheck disable=SC2086
          under "$t" env "${envs[@]}" timeout 120 python3 -m tritonkit bench \
            ${AB_BENCH:-paged_attention --models llama3-8b --dtype bfloat16 --num-tokens 1024 16384} \
            --series "${AB_SERIES_ARGS[@]}" --providers tritonkit --no-startup --no-plot --no-copy-ref \
            --out "$W/ab-$tag-$i" 2>&1 | tail -2 | tee -a "$W/log.txt"
          cp "$W/ab-$tag-$i/bench.json" "$W/ab-$tag-$i.json" 2>/dev/null
          echo "${envs[*]:-base}" > "$W/ab-$tag-$i.set"
        done
      done
      ;;
    *) echo "unknown step $step (host kernels tests validate ab)" >&2 ;;
  esac
done

# the table: each Triton's times over the first one's
python3 - "$W" $(for t in $TRITONS; do echo "${TAG[$t]}"; done) <<'EOF' 2>&1 | tee -a "$W/log.txt"
import json, os, statistics, sys
w, tags = sys.argv[1], sys.argv[2:]
first = tags[0]
def host(tag, key):
    rows = {}
    for r in (1, 2):
        p = os.path.join(w, f"host-{tag}-r{r}.json")
        if os.path.exists(p):
            for row in json.load(open(p))["rows"]:
                if key in row:
                    rows.setdefault(row["case"], []).append(row[key])
    return {k: min(v) for k, v in rows.items()}
# the fast path's time over a torch-only call's timed interleaved with it in the same process (host_overhead.py
# --torch-baseline): a slow spell of the host lands on both, so this ratio is what compares releases
for key, what in (("fast", "us per eager call (fast path, min of 2 rounds)"),
                  ("ratio", "fast path over the interleaved torch-only call (min of 2 rounds)")):
    h = {t: host(t, key) for t in tags}
    if not h[first]:
        continue
    print(f"\nhost {what}, Triton {' / '.join(tags)}, ratio to {first}")
    for case, us in h[first].items():
        cells = [f"{h[t].get(case, float('nan')):7.2f}" for t in tags]
        ratios = [f"{h[t].get(case, float('nan')) / us:5.2f}" for t in tags[1:]]
        print(f"  {case:<22} {' '.join(cells)}   {' '.join(ratios)}")
def kernels(tag, kind):
    p = os.path.join(w, f"{kind}-{tag}.json")
    if not os.path.exists(p):
        return {}
    out = {}
    for r in json.load(open(p)).get("points", []):
        t = r.get("graph") or r.get("eager")
        if r.get("provider") == "tritonkit" and r.get("status") == "ok" and t:
            out[(r.get("model", ""), r.get("config", "").split(" | ")[0], r.get("num_tokens"))] = t["median_us"]
    return out
# the ab step: each switch set's times over the first set's, per Triton
import glob
for tag in tags:
    sets = sorted(glob.glob(os.path.join(w, f"ab-{tag}-*.json")), key=lambda p: int(p.rsplit("-", 1)[1][:-5]))
    if not sets:
        continue
    runs = []
    for p in sets:
        pts = {}
        for r in json.load(open(p)).get("points", []):
            t = r.get("graph") or r.get("eager")
            if r.get("provider") == "tritonkit" and r.get("status") == "ok" and t:
                key = (r.get("model", ""), r.get("config", "").split(" | ")[0], r.get("num_tokens"))
                pts[key] = t["median_us"]
        runs.append((p.rsplit("-", 1)[1][:-5], open(p[:-5] + ".set").read().strip(), pts))
    print(f"\nab, Triton {tag}: us (CUDA graphs) and ratio to set {runs[0][0]} ({runs[0][1]})")
    for key, us in runs[0][2].items():
        cells = [f"{us:9.1f}"] + [f"{r[2][key]:9.1f} {r[2][key] / us:5.3f}" if key in r[2] else "        -" for r in runs[1:]]
        print(f"  {key[0][:14]:<14} {key[1][:30]:<30} {key[2]!s:>6} {'  '.join(cells)}")
    for i, name, _ in runs:
        print(f"  set {i}: {name}")
for kind in ("attn", "moe"):
    k = {t: kernels(t, kind) for t in tags}
    if not k[first]:
        continue
    print(f"\n{kind} kernel us (CUDA graphs), Triton {' / '.join(tags)}, ratio to {first} (above 1.03 marked)")
    for key, us in k[first].items():
        cells, marks = [f"{us:9.1f}"], []
        for t in tags[1:]:
            v = k[t].get(key)
            cells.append(f"{v:9.1f}" if v else "        -")
            marks.append(f"{v / us:5.2f}{'*' if v / us > 1.03 else ' '}" if v else "    - ")
        print(f"  {key[0][:14]:<14} {key[1][:28]:<28} {key[2]!s:>6} {' '.join(cells)}  {' '.join(marks)}")
EOF
tar -C "$W" -czf "$OUT/matrix.tgz" --exclude='*/.cache' . && cp "$W/log.txt" "$OUT/log.txt"
echo "wrote $OUT/matrix.tgz"
