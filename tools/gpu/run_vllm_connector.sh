#!/usr/bin/env bash
# The vLLM connector (issue 36) on a GPU machine: client/python/tests/test_vllm_connector.py with vLLM-shaped KV
# caches on the GPU (registered through CUDA IPC), the prefill instance in its own process, real SmolLM2 KV
# from the reference engine, every scheme's decode blocks compared with kvtctl's codec; plus the client's CUDA
# tests (test_cuda.py). One call:
#
#   tools/gpu/run_vllm_connector.sh prepare   # here: kvtd/kvtctl + libraries, the kvt stubs, a KV slice
#   run(kind="nvidia-h200", carry=[".gpu-vllm"], command="bash tools/gpu/run_vllm_connector.sh device")
#
# Environment (optional): KVT_BIN_DIR: kvtd and kvtctl from this folder instead of building them;
# KVT_VLLM_KV_SOURCE: a [L, 2, T, H, D] .npy dump (./kvt engine ... --dump-kv DIR) to slice instead of making one.
set -euo pipefail
cd "$(dirname "$0")/../.."
source tools/gpu/carry_libs.sh
DIR=.gpu-vllm

prepare() {
  local bin
  bin="$(kvt_binaries /tmp/kvt-vllm-bin)"
  local source="${KVT_VLLM_KV_SOURCE:-}"
  if [[ -z "$source" ]]; then
    ./kvt engine --device cpu --prompts 1 --prompt-tokens 1024 --new-tokens 1 --schemes bf16 \
      --dump-kv /tmp/kvt-vllm-kv >/dev/null
    source="$(ls /tmp/kvt-vllm-kv/*.npy | head -1)"
  fi
  rm -rf "$DIR"
  mkdir -p "$DIR/stage/bin" "$DIR/stage/lib"
  cp -f "$bin/kvtd" "$bin/kvtctl" "$DIR/stage/bin/"
  chmod u+w "$DIR"/stage/bin/*
  strip "$DIR"/stage/bin/*
  carry_ucx "$DIR/stage" "$DIR"/stage/bin/*
  tar -C "$DIR/stage" -cf - bin lib | xz -T0 -6 > "$DIR/bin.tar.xz"
  /usr/bin/python3 client/python/build_stubs.py --out "$DIR/stage/_proto"
  tar -C "$DIR/stage" -cf "$DIR/stubs.tar" _proto
  # The first 1000 tokens of every layer, as float16 (what the engine's bf16 cache holds fits it for SmolLM2).
  /usr/bin/python3 -c 'import numpy as np, sys
x = np.load(sys.argv[1], mmap_mode="r")
np.save(sys.argv[2], np.ascontiguousarray(x[:, :, :1000]).astype(np.float16))' "$source" "$DIR/kv.npy"
  rm -rf "$DIR/stage"
  du -sh "$DIR"
}

device() {
  local out="${OUT:-$DIR/out}" work=/tmp/kvt-vllm
  mkdir -p "$out" "$work"
  xz -dc "$DIR/bin.tar.xz" | tar -C "$work" -xf -
  rm -rf client/python/kvt/_proto && tar -C client/python/kvt -xf "$DIR/stubs.tar"
  export PYTHONPATH="$PWD/client/python:$PWD/client/python/tests" PYTHONUNBUFFERED=1
  export LD_LIBRARY_PATH="$work/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" UCX_MODULE_DIR="$work/lib/ucx"
  export KVT_VLLM_KV="$PWD/$DIR/kv.npy"
  check_libs tools/gpu/run_vllm_connector.sh "$work"/bin/*
  {
    nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv || true
    python3 -c 'import torch, grpc; print("torch", torch.__version__, "cuda", torch.cuda.is_available(), "grpc", grpc.__version__)'
  } 2>&1 | tee "$out/device.txt"
  local rc=0
  (cd client/python && python3 -m pytest tests/test_vllm_connector.py tests/test_cuda.py -v -rs \
      --kvtd="$work/bin/kvtd" --kvtctl="$work/bin/kvtctl" --junitxml="$out/pytest.xml") 2>&1 \
    | tee "$out/pytest.txt" || rc=$?
  exit "$rc"
}

case "${1:-}" in
  prepare) prepare ;;
  device) device ;;
  *) echo "usage: $0 prepare|device" >&2; exit 2 ;;
esac
