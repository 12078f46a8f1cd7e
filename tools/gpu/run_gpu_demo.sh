#!/usr/bin/env bash
# The main job on a GPU machine (issue 5): two kvtd daemons whose KV caches are GPU regions (CUDA IPC), pages
# encoded and decoded in place by the CUDA kernels, over a rate-limited loopback link; the same demo with host
# shared memory beside it for comparison.
#
#   tools/gpu/run_gpu_demo.sh prepare   # here: bazel build -c opt kvtd and kvtctl, copy them, the shared libraries
#                                       # they need and UCX's transport modules into .gpu-demo/ (git-ignored)
#   tools/gpu/run_gpu_demo.sh device    # there, from the repo root; output under $OUT (default .gpu-demo/out)
#
# With the device tool: run "tools/gpu/run_gpu_demo.sh prepare" here, then
#   run(kind="nvidia-h100-x1", carry=[".gpu-demo"], command="bash tools/gpu/run_gpu_demo.sh device")
# KVT_DEMO_ARGS adds flags to both demos (e.g. "--rate-gbps 5 --tokens 8192"). kvtd and kvtctl of an earlier build
# copied by hand to .gpu-demo/base/ run the GPU demo first, in the same lease, so before and after compare.
set -euo pipefail
cd "$(dirname "$0")/../.."
source tools/gpu/carry_libs.sh
DIR=.gpu-demo

prepare() {
  bazel build -c opt //server:kvtd //tools/kvtctl:kvtctl
  local out
  out="$(bazel info -c opt bazel-bin 2>/dev/null)"
  rm -rf "$DIR/bin" "$DIR/lib"
  mkdir -p "$DIR/bin" "$DIR/lib/ucx"
  cp -f "$out/server/kvtd" "$out/tools/kvtctl/kvtctl" "$DIR/bin/"
  chmod u+w "$DIR"/bin/*
  strip "$DIR"/bin/*
  carry_ucx "$DIR" "$DIR"/bin/*
  echo "prepared: $(ls "$DIR/bin" | tr '\n' ' ')+ $(ls "$DIR/lib" | wc -l) libraries, $(du -sh "$DIR" | cut -f1)"
}

device() {
  local out="${OUT:-$DIR/out}"
  mkdir -p "$out"
  export LD_LIBRARY_PATH="$PWD/$DIR/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  export UCX_MODULE_DIR="$PWD/$DIR/lib/ucx"
  check_libs tools/gpu/run_gpu_demo.sh "$DIR"/bin/*
  { nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv || true; } | tee "$out/device.txt"
  echo "cores: $(nproc)" | tee -a "$out/device.txt"
  local rc=0
  cd "$out"
  if [ -x "$OLDPWD/$DIR/base/kvtd" ]; then
    echo "== baseline ($DIR/base), GPU regions =="
    # shellcheck disable=SC2086
    "$OLDPWD/$DIR/base/kvtctl" demo --kvtd="$OLDPWD/$DIR/base/kvtd" --gpu=0 --verify ${KVT_DEMO_ARGS:-} 2>&1 \
      | tee gpu-demo-base.txt || rc=1
    echo "== this build =="
  fi
  # shellcheck disable=SC2086
  "$OLDPWD/$DIR/bin/kvtctl" demo --kvtd="$OLDPWD/$DIR/bin/kvtd" --gpu=0 --verify --svg=gpu-timeline.svg \
    ${KVT_DEMO_ARGS:-} 2>&1 | tee gpu-demo.txt || rc=1
  # shellcheck disable=SC2086
  "$OLDPWD/$DIR/bin/kvtctl" demo --kvtd="$OLDPWD/$DIR/bin/kvtd" --verify --svg=host-timeline.svg \
    ${KVT_DEMO_ARGS:-} 2>&1 | tee host-demo.txt || rc=1
  for f in /tmp/kvt-demo-*/*.log; do [ -f "$f" ] && cp "$f" "$(basename "$(dirname "$f")")-$(basename "$f")"; done
  return $rc
}

case "${1:-}" in
  prepare) prepare ;;
  device) device ;;
  *) sed -n '2,13p' "$0"; exit 2 ;;
esac
