#!/usr/bin/env bash
# Builds the GPU codec's test and benchmark here, and runs them on a GPU machine that has no Bazel and no network.
#
#   tools/gpu/run_gpu.sh prepare   # here: bazel build -c opt the two binaries, copy them and every shared library
#                                  # they need beyond glibc/libstdc++ into .gpu/ (git-ignored)
#   tools/gpu/run_gpu.sh device    # there, from the repo root: tests, then a short compute-sanitizer memcheck,
#                                  # then the benchmark; logs under $OUT (default ./.gpu/out).
#                                  # KVT_GPU_PROFILE=1 adds an Nsight Compute summary of one lynx encode/decode;
#                                  # KVT_GPU_COUNTS=1 saves executed instructions per SASS instruction of both;
#                                  # KVT_GPU_SASS=1 saves the benchmark's SASS; a .gpu/base/gpu_codec_benchmark
#                                  # (an earlier build, copied there by hand) runs first, as a same-lease baseline,
#                                  # and each .gpu/alt*/gpu_codec_benchmark (variants) on lynx, lynx8 and lynx4.
#
# With the device tool: run "tools/gpu/run_gpu.sh prepare" here, then
#   run(kind="nvidia-h100-x1", carry=[".gpu"], command="bash tools/gpu/run_gpu.sh device")
# The binaries link the CUDA runtime statically; only the driver's libcuda.so.1 comes from the GPU machine.
# docs/BENCHMARKS.md ("Codec on the GPU") records what this printed.
set -euo pipefail
cd "$(dirname "$0")/../.."
source tools/gpu/carry_libs.sh

TARGETS=(//codec/gpu:codec_cuda_test //codec/gpu:gpu_codec_benchmark)

prepare() {
  bazel build -c opt "${TARGETS[@]}"
  # The opt output tree itself: the bazel-bin symlink follows whichever build ran last (other users' too).
  local out
  out="$(bazel info -c opt bazel-bin 2>/dev/null)"
  rm -rf .gpu/bin .gpu/lib
  mkdir -p .gpu/bin .gpu/lib
  local bin
  for bin in codec_cuda_test gpu_codec_benchmark; do
    cp -f "${out}/codec/gpu/${bin}" .gpu/bin/
    chmod u+w ".gpu/bin/${bin}"
  done
  copy_needed_libs .gpu/lib .gpu/bin/*
  echo "prepared: $(ls .gpu/bin | tr '\n' ' ')+ $(ls .gpu/lib | wc -l) libraries, $(du -sh .gpu | cut -f1)"
}

device() {
  local out="${OUT:-.gpu/out}"
  mkdir -p "$out"
  export LD_LIBRARY_PATH="$PWD/.gpu/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  check_libs tools/gpu/run_gpu.sh .gpu/bin/*
  { nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.mem --format=csv || true; } | tee "$out/device.txt"
  local rc=0
  SECONDS=0
  .gpu/bin/codec_cuda_test 2>&1 | tee "$out/codec_cuda_test.log" \
    | grep -E "^\[ +(OK|FAILED|SKIPPED|PASSED) +\]|^\[==========\]|Failure|error" || true
  [ "${PIPESTATUS[0]}" -eq 0 ] || rc=1
  echo "tests: ${SECONDS}s"
  if [ -x .gpu/base/gpu_codec_benchmark ]; then
    echo "== baseline (.gpu/base) =="
    .gpu/base/gpu_codec_benchmark 2>&1 | tee "$out/gpu_codec_benchmark_base.log" || true
    echo "== this build =="
  fi
  local alt
  for alt in .gpu/alt*/; do  # variants under test (.gpu/alt, .gpu/alt1, ...), copied there by hand
    [ -x "${alt}gpu_codec_benchmark" ] || continue
    alt="${alt%/}"
    echo "== variant (${alt}) =="
    "${alt}/gpu_codec_benchmark" lynx lynx8 lynx4 2>&1 | tee "$out/gpu_codec_benchmark_${alt#.gpu/}.log" || true
    echo "== this build =="
  done
  .gpu/bin/gpu_codec_benchmark 2>&1 | tee "$out/gpu_codec_benchmark.log" || rc=1
  if [ "${KVT_GPU_PROFILE:-0}" = 1 ] && command -v ncu >/dev/null; then  # one lynx encode and decode, profiled
    local kernel
    for kernel in Encode Decode; do
      timeout 150 ncu --set full --import-source no --launch-skip 8 --launch-count 1 -k "regex:${kernel}" \
        .gpu/bin/gpu_codec_benchmark lynx >"$out/ncu_${kernel}.log" 2>&1 || true
      grep -E "^  [A-Za-z].*Kernel|Duration|DRAM Throughput|Compute \(SM\) Throughput|Achieved Occupancy|Registers Per|Issued Warp Per|No Eligible|Warp Cycles Per Issued|Executed Instructions  |Bank Conflicts" \
        "$out/ncu_${kernel}.log" | head -20
    done
  fi
  if [ "${KVT_GPU_COUNTS:-0}" = 1 ] && command -v ncu >/dev/null; then
    # Executed instructions per SASS instruction of one lynx tile encode and one decode (Nsight Compute's source
    # page), to see where the encoder's instructions go; gzipped CSV under $out.
    local kernel
    for kernel in LynxTileEncode Decode; do
      timeout 150 ncu --section SourceCounters --launch-skip 8 --launch-count 1 -k "regex:${kernel}" -f \
        -o "$out/counts_${kernel}" .gpu/bin/gpu_codec_benchmark lynx >"$out/counts_${kernel}.log" 2>&1 || true
      if [ -f "$out/counts_${kernel}.ncu-rep" ]; then
        ncu -i "$out/counts_${kernel}.ncu-rep" --page source --print-source sass --csv 2>&1 \
          | gzip >"$out/counts_${kernel}.csv.gz" || true
        rm -f "$out/counts_${kernel}.ncu-rep"
      fi
      tail -3 "$out/counts_${kernel}.log"
    done
  fi
  if [ "${KVT_GPU_SASS:-0}" = 1 ] && command -v cuobjdump >/dev/null; then
    # The lynx kernels' SASS (the bf16 instances), for instruction counts without a device.
    cuobjdump -sass .gpu/bin/gpu_codec_benchmark 2>/dev/null \
      | awk '/Function : /{p = /LynxTileEncodeKernel|DecodeKernel/ && /bfloat16/} p' | gzip >"$out/sass.txt.gz" || true
  fi
  if command -v compute-sanitizer >/dev/null; then
    timeout 240 compute-sanitizer --tool memcheck --error-exitcode 3 .gpu/bin/codec_cuda_test \
      --gtest_filter='*OddChannelCounts*:*Corrupt*:*FrameSpikes*:*WithoutLeaving*:*NanOrInf*:*Straddle*:*Kept*:*IntoHostContainers*' >"$out/memcheck.log" 2>&1 \
      && echo "memcheck: clean" || { echo "memcheck: exit $? (see memcheck.log)"; tail -n 20 "$out/memcheck.log"; }
  fi
  echo "device: ${SECONDS}s in all"
  return $rc
}

case "${1:-}" in
  prepare) prepare ;;
  device) device ;;
  *) sed -n '2,16p' "$0"; exit 2 ;;
esac
