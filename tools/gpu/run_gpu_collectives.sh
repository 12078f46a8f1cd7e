#!/usr/bin/env bash
# The collective module's CUDA backend on a machine with several GPUs (issue 6): its tests (AllReduce and MoE
# Dispatch/Combine, world sizes 2-8, bitwise against the CPU reference; failures; calls routed to NCCL), then the
# AllReduce benchmark and the MoE benchmark beside NCCL.
#
#   tools/gpu/run_gpu_collectives.sh prepare   # here: bazel build -c opt the test and the benchmark, copy them
#                                              # and the shared libraries they need into .gpu-coll/ (git-ignored)
#   tools/gpu/run_gpu_collectives.sh device    # there, from the repo root; logs under $OUT (default .gpu-coll/out)
#
# With the device tool: run "tools/gpu/run_gpu_collectives.sh prepare" here, then
#   run(kind="nvidia-h200-x4", carry=[".gpu-coll"], command="bash tools/gpu/run_gpu_collectives.sh device")
# KVT_BENCH_ARGS adds AllReduce benchmark flags (e.g. "--sizes_mib=64 --modes=4"), KVT_MOE_ARGS MoE benchmark
# flags (e.g. "--worlds=2,4"); KVT_TEST_FILTER a gtest filter; KVT_SKIP_TESTS=1 skips the tests,
# KVT_SKIP_ALL_REDUCE=1 the AllReduce benchmark.
# NCCL comes from the machine (its PyTorch's nvidia-nccl wheel, else the system's libnccl.so.2); NVLink
# multicast stays off (NCCL_NVLS_ENABLE=0), as the machines require.
set -euo pipefail
cd "$(dirname "$0")/../.."
source tools/gpu/carry_libs.sh
DIR=.gpu-coll

prepare() {
  local targets=(cuda_communicator_test cuda_expert_all_to_all_test cuda_collective_benchmark cuda_moe_benchmark)
  bazel build -c opt "${targets[@]/#/\/\/collective:}"
  local out
  out="$(bazel info -c opt bazel-bin 2>/dev/null)"
  rm -rf "$DIR/bin" "$DIR/lib"
  mkdir -p "$DIR/bin" "$DIR/lib"
  cp -f "${targets[@]/#/$out\/collective\/}" "$DIR/bin/"
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
  local nccl
  nccl="$(find_nccl)"
  echo "NCCL: ${nccl:-none found}"
  # The tests of calls routed to NCCL read it from here (they skip without it).
  export KVT_NCCL_LIB="${nccl}"
  if [ "${KVT_SKIP_TESTS:-0}" != 1 ]; then
    local t
    for t in cuda_communicator_test cuda_expert_all_to_all_test; do
      "$DIR/bin/$t" --gtest_filter="${KVT_TEST_FILTER:-*}" 2>&1 | tee "$out/$t.log" \
        | grep -E "^\[ +(FAILED|SKIPPED|PASSED) +\]|^\[==========\]|Failure|Expected|Which is|differ" | head -60 || true
      [ "${PIPESTATUS[0]}" -eq 0 ] || rc=1
    done
    echo "tests: ${SECONDS}s"
  fi
  if [ "${KVT_SKIP_ALL_REDUCE:-0}" != 1 ]; then
    # shellcheck disable=SC2086
    "$DIR/bin/cuda_collective_benchmark" --nccl_lib="${nccl}" ${KVT_BENCH_ARGS:-} 2>&1 \
      | tee "$out/cuda_collective_benchmark.log" || rc=1
  fi
  # shellcheck disable=SC2086
  "$DIR/bin/cuda_moe_benchmark" --nccl_lib="${nccl}" ${KVT_MOE_ARGS:-} 2>&1 | tee "$out/cuda_moe_benchmark.log" || rc=1
  echo "device: ${SECONDS}s in all"
  return $rc
}

case "${1:-}" in
  prepare) prepare ;;
  device) device ;;
  *) sed -n '2,17p' "$0"; exit 2 ;;
esac
