#!/usr/bin/env bash
# `kvtctl bench transport` (issue 3) on the device machine's host, which has 16 cores where the development VM has
# 2: the data plane beside ucx_perftest with 1, 2 and 4 UCX workers per side. No GPU is used.
#
#   tools/gpu/run_transport_bench.sh prepare   # here: bazel build -c opt kvtctl, copy it, ucx_perftest, the shared
#                                              # libraries they need and UCX's transport modules into .xport/
#   tools/gpu/run_transport_bench.sh device    # there, from the repo root; output under $OUT (default .xport/out)
#
# With the device tool: run "tools/gpu/run_transport_bench.sh prepare" here, then
#   run(kind="nvidia-h100-x1", carry=[".xport"], command="bash tools/gpu/run_transport_bench.sh device")
# KVT_XPORT_ARGS replaces the bench flags (default: both transports, workers 1,2,4, the default sizes and rates);
# KVT_XPORT_REPEAT runs it that many times (default 2), so that the noise between runs shows.
set -euo pipefail
cd "$(dirname "$0")/../.."
source tools/gpu/carry_libs.sh
DIR=.xport

prepare() {
  bazel build -c opt //tools/kvtctl:kvtctl
  local out
  out="$(bazel info -c opt bazel-bin 2>/dev/null)"
  rm -rf "$DIR/bin" "$DIR/lib"
  mkdir -p "$DIR/bin" "$DIR/lib/ucx"
  cp -f "$out/tools/kvtctl/kvtctl" "$(command -v ucx_perftest)" "$DIR/bin/"
  chmod u+w "$DIR"/bin/*
  strip "$DIR/bin/kvtctl"
  carry_ucx "$DIR" "$DIR"/bin/*
  echo "prepared: $(ls "$DIR/bin" | tr '\n' ' ')+ $(ls "$DIR/lib" | wc -l) libraries, $(du -sh "$DIR" | cut -f1)"
}

device() {
  local out="${OUT:-$DIR/out}"
  mkdir -p "$out"
  export LD_LIBRARY_PATH="$PWD/$DIR/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  export UCX_MODULE_DIR="$PWD/$DIR/lib/ucx"
  export UCX_MEM_EVENTS=no  # kvt registers no memory with UCX; its memory hooks are not needed
  check_libs tools/gpu/run_transport_bench.sh "$DIR"/bin/*
  { echo "cores: $(nproc)"; grep -m1 "model name" /proc/cpuinfo || true; uname -r; } | tee "$out/machine.txt"
  local args="${KVT_XPORT_ARGS:---transports tcp,shm --ucx-workers 1,2,4}"
  local rc=0
  for i in $(seq 1 "${KVT_XPORT_REPEAT:-2}"); do
    echo "== run $i: kvtctl bench transport $args"
    # shellcheck disable=SC2086
    "$DIR/bin/kvtctl" bench transport --perftest="$PWD/$DIR/bin/ucx_perftest" $args 2>&1 |
      grep -v "UCX  ERROR" | tee "$out/run$i.txt" || rc=1
  done
  return $rc
}

case "${1:-}" in
  prepare) prepare ;;
  device) device ;;
  *) sed -n '2,13p' "$0"; exit 2 ;;
esac
