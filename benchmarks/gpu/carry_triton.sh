#!/usr/bin/env bash
# A PyPI Triton (3.7, 3.8, 3.9 ...) in two parts the device tool can carry in two runs (at most 64 MiB with the tree
# a run), for benchmarks/gpu/triton_matrix.sh: libtriton.so stripped of its static symbol table (3.8.0: 505 -> 192
# MB; the dynamic symbols Python and the backends load stay), the AMD backend, CUPTI, proton, the Blackwell ptxas,
# cuobjdump, nvdisasm, Triton's C++ headers and its test and example plugins dropped, xz -9: 48.1 MB for 3.8.0, 48.3
# MB for 3.9.0. The tree takes about 20 MB of the 64 MiB (counted in 4 KB blocks), so one archive no longer fits a
# run beside it: DIR/a holds its first 22 MB, DIR/b the rest (three runs a Triton with ../shared/device/carry-
# triton.sh's parts). What an sm_90 compile and launch need stays; SASS dumps do not work (the one test that needs
# cuobjdump fails there). About 3 CPU minutes.
#
#   usage (here):      benchmarks/gpu/carry_triton.sh 3.8.0 .t38        (DIR git-ignored: .git/info/exclude)
#   device run 1:      carry [".t38/a"] (and another release's a/, 44 MB together):  mkdir -p /tmp/tp && cp .t38/a/* /tmp/tp/
#   device run 2:      carry [".t38/b", ...], within the machine's warm window of run 1 (its /tmp stays):
#                      T=/tmp/triton-3.8.0; mkdir -p $T && cat /tmp/tp/3.8.0.a .t38/b/* | xz -d | tar -x -C $T
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
  "$t/FileCheck" "$t/include" "$t"/plugins/libMLIRDialectPlugin.so*
strip --strip-unneeded "$t/_C/libtriton.so"
chmod +x "$t"/backends/nvidia/bin/* 2>/dev/null || true
rm -rf "$DIR" && mkdir -p "$DIR/a" "$DIR/b"
tar -C "$work/x" -cf - . | xz -T0 -9 > "$work/t.tar.xz"
head -c 22000000 "$work/t.tar.xz" > "$DIR/a/$VER.a"
tail -c +22000001 "$work/t.tar.xz" > "$DIR/b/$VER.b"
echo "Triton $VER in two parts: $DIR/a ($(du -h "$DIR/a/$VER.a" | cut -f1)), $DIR/b ($(du -h "$DIR/b/$VER.b" | cut -f1))"
