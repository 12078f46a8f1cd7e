#!/usr/bin/env bash
# The collective module's CUDA backend on a machine with several GPUs (issue 6): its tests (world sizes 2-4,
# bitwise against the CPU reference; failures), then the AllReduce benchmark beside NCCL.
#
#   tools/gpu/run_gpu_collectives.sh prepare   # here: bazel build -c opt the test and the benchmark, copy them
#                                              # and the shared libraries they need into .gpu-coll/ (git-ignored)
#   tools/gpu/run_gpu_collectives.sh device    # there, from the repo root; logs under $OUT (default .gpu-coll/out)
#
# With the device tool: run "tools/gpu/run_gpu_collectives.sh prepare" here, then
#   run(kind="nvidia-h200-x4", carry=[".gpu-coll"], command="bash tools/gpu/run_gpu_collectives.sh device")
# KVT_BENCH_ARGS adds benchmark flags (e.g. "--sizes_mib=64 --modes=4"); KVT_SKIP_TESTS=1 skips the tests.
# NCCL comes from the machine (its PyTorch's nvidia-nccl wheel, else the system's libnccl.so.2); NVLink
# multicast stays off (NCCL_NVLS_ENABLE=0), as the machines require.
set -euo pipefail
cd "$(dirname "$0")/../.."
source tools/gpu/carry_libs.sh
DIR=.gpu-coll

prepare() {
  bazel build -c opt //transport/collective:cuda_communicator_test //transport/collective:cuda_collective_benchmark
  local out
  out="$(bazel info -c opt bazel-bin 2>/dev/null)"
  rm -rf "$DIR/bin" "$DIR/lib"
  mkdir -p "$DIR/bin" "$DIR/lib"
  cp -f "$out/transport/collective/cuda_communicator_test" "$out/transport/collective/cuda_collective_benchmark" \
    "$DIR/bin/"
  chmod u+w "$DIR"/bin/*
  strip "$DIR"/bin/*
  copy_needed_libs "$DIR/lib" "$DIR"/bin/*
  echo "prepared: $(ls "$DIR/bin" | tr '\n' ' ')+ $(ls "$DIR/lib" | wc -l) libraries, $(du -sh "$DIR" | cut -f1)"
}

find_nccl() {
  local lib
  lib="$(python3 -c 'import nvidia.nccl, os; print(os.path.join(list(nvidia.nccl.__path__)[0], "lib", "libnccl.so.2"))' 2>/dev/null || true)"
  if [ -n "$lib" ] && [ -f "$lib" ]; then echo "$lib"; return; fi
  ldconfig -p 2>/dev/null | awk '/libnccl\.so\.2 / {print $NF; exit}'
}

device() {
  local out="${OUT:-$DIR/out}"
  mkdir -p "$out"
  export LD_LIBRARY_PATH="$PWD/$DIR/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  export NCCL_NVLS_ENABLE=0
  check_libs tools/gpu/run_gpu_collectives.sh "$DIR"/bin/*
  { nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv || true; nvidia-smi topo -m || true; } \
    | tee "$out/device.txt"
  local rc=0
  SECONDS=0
  if [ "${KVT_SKIP_TESTS:-0}" != 1 ]; then
    "$DIR/bin/cuda_communicator_test" 2>&1 | tee "$out/cuda_communicator_test.log" \
      | grep -E "^\[ +(OK|FAILED|SKIPPED|PASSED) +\]|^\[==========\]|Failure|Expected|Which is|differ" | head -60 || true
    [ "${PIPESTATUS[0]}" -eq 0 ] || rc=1
    echo "tests: ${SECONDS}s"
  fi
  local nccl
  nccl="$(find_nccl)"
  echo "NCCL: ${nccl:-none found}"
  # shellcheck disable=SC2086
  "$DIR/bin/cuda_collective_benchmark" --nccl_lib="${nccl}" ${KVT_BENCH_ARGS:-} 2>&1 \
    | tee "$out/cuda_collective_benchmark.log" || rc=1
  echo "device: ${SECONDS}s in all"
  return $rc
}

case "${1:-}" in
  prepare) prepare ;;
  device) device ;;
  *) sed -n '2,14p' "$0"; exit 2 ;;
esac
