#!/usr/bin/env bash
# A PyPI Triton (3.7, 3.8, 3.9 ...) as ONE part the device tool can carry in one run (at most 64 MiB with the tree),
# for benchmarks/gpu/triton_matrix.sh: libtriton.so stripped of its static symbol table (3.8.0: 505 -> 192 MB; the
# dynamic symbols Python and the backends load stay), the AMD backend, CUPTI, proton, the Blackwell ptxas, cuobjdump,
# nvdisasm and Triton's test libraries dropped, xz -9: 48 MB for 3.8.0, 49 MB for 3.9.0 (three runs a Triton with
# ../shared/device/carry-triton.sh's parts). What an sm_90 compile and launch need stays; SASS dumps do not work (the
# one test that needs cuobjdump fails there). About 3 CPU minutes.
#
#   usage (here):      benchmarks/gpu/carry_triton.sh 3.8.0 .t38        (DIR git-ignored: .git/info/exclude)
#   device run:        carry [".t38", ...];  T=/tmp/triton-3.8.0; mkdir -p $T && xz -d < .t38/t.tar.xz | tar -x -C $T
#   then:              TRITONS="image $T" bash benchmarks/gpu/triton_matrix.sh host kernels tests validate
set -euo pipefail
VER=${1:?usage: carry_triton.sh VERSION DIR}
DIR=${2:?usage: carry_triton.sh VERSION DIR}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64 \
  --platform manylinux2014_x86_64 -d "$work" "triton==$VER"
mkdir -p "$work/x"
python3 -m zipfile -e "$work"/triton-"$VER"-*.whl "$work/x"
t="$work/x/triton"
rm -rf "$t/backends/amd" "$t/backends/nvidia/lib/cupti" "$t/backends/nvidia/lib/cupti-blackwell" \
  "$t/backends/nvidia/bin/ptxas-blackwell" "$t/backends/nvidia/bin/cuobjdump" "$t/backends/nvidia/bin/nvdisasm" \
  "$t/_C/libproton.so" "$t/instrumentation/libGPUInstrumentationTestLib.so" "$t/plugins/libTritonPluginsTestLib.so" \
  "$t/FileCheck"
strip --strip-unneeded "$t/_C/libtriton.so"
chmod +x "$t"/backends/nvidia/bin/* 2>/dev/null || true
rm -rf "$DIR" && mkdir -p "$DIR"
tar -C "$work/x" -cf - . | xz -T0 -9 > "$DIR/t.tar.xz"
echo "Triton $VER in one part: $DIR/t.tar.xz ($(du -h "$DIR/t.tar.xz" | cut -f1)); carry $DIR"
