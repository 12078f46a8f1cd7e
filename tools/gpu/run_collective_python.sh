#!/usr/bin/env bash
# kvt.collective and kvt.moe (the collectives' C ABI from Python, issue 39) on a GPU machine: client/python/tests/
# test_collective.py and test_moe.py with the CUDA backend over torch tensors (ranks share the GPU when there are
# fewer GPUs than ranks), graph capture and replay included, plus the host backends. One call:
#
#   tools/gpu/run_collective_python.sh prepare   # here: libkvt_collective.so (opt) + libraries, the kvt stubs
#   run(kind="nvidia-h200", carry=[".gpu-collpy"], command="bash tools/gpu/run_collective_python.sh device")
#   ... device bench   # then, on 2+ GPUs: tools/gpu/collective_bench.py, kvt beside torch.distributed's NCCL,
#                      # per call and with --graph (KVT_COLL_BENCH_ARGS: more flags for both)
set -euo pipefail
cd "$(dirname "$0")/../.."
source tools/gpu/carry_libs.sh
DIR=.gpu-collpy

prepare() {
  bazel build -c opt //collective:libkvt_collective.so
  local out
  out="$(bazel info -c opt bazel-bin 2>/dev/null)"
  rm -rf "$DIR"
  mkdir -p "$DIR/lib"
  cp -f "$out/collective/libkvt_collective.so" "$DIR/"
  chmod u+w "$DIR/libkvt_collective.so"
  strip --strip-unneeded "$DIR/libkvt_collective.so"
  carry_ucx "$DIR" "$DIR/libkvt_collective.so"
  /usr/bin/python3 client/python/build_stubs.py --out "$DIR/_proto"
  du -sh "$DIR"
}

device() {
  local out="${OUT:-$DIR/out}"
  mkdir -p "$out"
  rm -rf client/python/kvt/_proto && cp -r "$DIR/_proto" client/python/kvt/_proto
  export PYTHONPATH="$PWD/client/python" PYTHONUNBUFFERED=1 KVT_COLLECTIVE_LIB="$PWD/$DIR/libkvt_collective.so"
  export LD_LIBRARY_PATH="$PWD/$DIR/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" UCX_MODULE_DIR="$PWD/$DIR/lib/ucx"
  check_libs tools/gpu/run_collective_python.sh "$DIR/libkvt_collective.so"
  {
    nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv || true
    python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.cuda.is_available())'
  } 2>&1 | tee "$out/device.txt"
  (cd client/python && python3 -m pytest tests/test_collective.py tests/test_moe.py -v -rs -s -p no:cacheprovider \
      --kvtd=/bin/true --junitxml="$out/pytest.xml") 2>&1 | tee "$out/pytest.txt"
  if [[ "${1:-}" == bench ]]; then
    # Per call, then as engines run decode steps (calls captured in a CUDA graph); KVT_COLL_BENCH_ARGS adds flags.
    # shellcheck disable=SC2086
    NCCL_NVLS_ENABLE=0 python3 tools/gpu/collective_bench.py ${KVT_COLL_BENCH_ARGS:-} 2>&1 | tee "$out/bench.txt"
    # shellcheck disable=SC2086
    NCCL_NVLS_ENABLE=0 python3 tools/gpu/collective_bench.py --graph ${KVT_COLL_BENCH_ARGS:-} 2>&1 \
      | tee "$out/bench-graph.txt"
  fi
}

"$@"
