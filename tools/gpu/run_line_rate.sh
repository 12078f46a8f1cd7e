#!/usr/bin/env bash
# Line rate (issue 33) on a GPU host: `kvtctl demo` sweeping link rates with GPU regions and with host memory,
# both daemons on one machine over UCX tcp on loopback, each run profiled stage by stage on both daemons; with an
# unlimited rate the data plane alone is measured in the same run (the demo's data-plane reference).
#
#   tools/gpu/run_line_rate.sh prepare   # here: bazel build -c opt kvtd, kvtctl and the GPU codec's tests, copy them,
#                                        # the shared libraries they need and UCX's transport modules into
#                                        # .gpu-lr-stage/, and pack that into .gpu-lr/payload.tar.xz (git-ignored;
#                                        # packed, because the device tool carries at most 64 MiB)
#   tools/gpu/run_line_rate.sh device    # there, from the repo root; JSON, SVG and logs under $OUT
#
# With the device tool: run "tools/gpu/run_line_rate.sh prepare" here, then
#   run(kind="nvidia-h200-x4", carry=[".gpu-lr"], command="bash tools/gpu/run_line_rate.sh device")
# KVT_LR_RUNS ("gpu:8192 host:8192 gpu:32768:int8,lynx gpu:8192:int8,lynx:--page-tokens=512+--ucx-workers=1": path,
# tokens, schemes and more demo flags ('+' between them) of each sweep, in order), or
# KVT_LR_TOKENS (default 8192; several, comma-separated) x KVT_LR_PATHS (default "gpu host"), KVT_LR_RATES (default
# 10,25,50,0), KVT_LR_SCHEMES (default int8,int4,lynx), KVT_LR_ARGS (more demo
# flags), KVT_LR_DEMO_TIMEOUT (seconds a sweep may take), KVT_LR_TESTS=1 (prepare and run the GPU codec's tests too). kvtd and kvtctl of an earlier build copied by hand to
# .gpu-lr-stage/base/ run first, in the same lease, so before and after compare. tools/gpu/line_rate_summary.py
# prints the tables from the JSON files.
set -euo pipefail
cd "$(dirname "$0")/../.."
source tools/gpu/carry_libs.sh
DIR=.gpu-lr

prepare() {
  bazel build -c opt //server:kvtd //tools/kvtctl:kvtctl
  [ "${KVT_LR_TESTS:-0}" = 1 ] && bazel build -c opt //codec/gpu:codec_cuda_test
  local out stage=.gpu-lr-stage
  out="$(bazel info -c opt bazel-bin 2>/dev/null)"
  rm -rf "$stage/bin" "$stage/lib" "$stage/tests" "$DIR"
  mkdir -p "$stage/bin" "$stage/lib/ucx" "$stage/tests" "$DIR"
  cp -f "$out/server/kvtd" "$out/tools/kvtctl/kvtctl" "$stage/bin/"
  [ "${KVT_LR_TESTS:-0}" = 1 ] && cp -f "$out/codec/gpu/codec_cuda_test" "$stage/tests/"
  chmod u+w "$stage"/bin/* "$stage"/tests/* 2>/dev/null || true
  strip "$stage"/bin/* "$stage"/tests/* 2>/dev/null || true
  carry_ucx "$stage" "$stage"/bin/*
  cp -f tools/gpu/line_rate_summary.py "$stage/"
  tar -C "$stage" -cf - . | xz -T0 -6 >"$DIR/payload.tar.xz"
  echo "prepared: $(ls "$stage/bin" | tr '\n' ' ')$( [ -d "$stage/base" ] && echo "+ base ")+ $(ls "$stage/lib" | wc -l) libraries: $(du -sh "$DIR/payload.tar.xz" | cut -f1) packed"
}

# demo BUILD_DIR NAME PATH TOKENS [FLAGS]: one sweep into $out/NAME-PATH-TOKENS[-FLAGS].{json,svg,err}; FLAGS are
# more demo flags separated by '+'.
demo() {
  local bin="$1" name="$2" path="$3" tokens="$4" extra="${5:-}"
  local tag="$name-$path-$tokens" gpu_flag=""
  [ -n "$extra" ] && tag="$tag-$(tr -c 'A-Za-z0-9=\n' '_' <<<"${extra//--/}" | tr -d '\n')"
  [ "$path" = gpu ] && gpu_flag="--gpu=0"
  echo "== $(date +%T) $tag: kvtctl demo $gpu_flag --tokens=$tokens --rate-gbps=${KVT_LR_RATES:-10,25,50,0}"
  # KVT_LR_DEMO_TIMEOUT: seconds one sweep may take (0 = no limit), so that a long last sweep cannot keep the
  # others' results from coming back.
  local limit=()
  [ "${KVT_LR_DEMO_TIMEOUT:-0}" -gt 0 ] && limit=(timeout "${KVT_LR_DEMO_TIMEOUT}")
  # shellcheck disable=SC2086
  "${limit[@]}" "$bin/kvtctl" demo --kvtd="$bin/kvtd" $gpu_flag --tokens="$tokens" --warmup-tokens="$tokens" \
    --rate-gbps="${KVT_LR_RATES:-10,25,50,0}" --schemes="${KVT_LR_SCHEMES:-int8,int4,lynx}" --eval-layers=2 \
    --verify --json --svg="$out/$tag.svg" ${KVT_LR_ARGS:-} ${extra//+/ } >"$out/$tag.json" 2>"$out/$tag.err" || {
    echo "FAILED: $tag"
    tail -20 "$out/$tag.err"
    return 1
  }
}

device() {
  # Everything is written to $out and packed at the end into $OUT/line_rate.tar.gz beside summary.txt: the device
  # tool brings back at most 8 files.
  local final="${OUT:-$DIR/out}"
  out=/tmp/kvt-line-rate-out
  rm -rf "$out" && mkdir -p "$out" "$final"
  local root=/tmp/kvt-line-rate
  rm -rf "$root" && mkdir -p "$root" && xz -dc "$DIR/payload.tar.xz" | tar -C "$root" -xf -
  export LD_LIBRARY_PATH="$root/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  export UCX_MODULE_DIR="$root/lib/ucx"
  export UCX_MEM_EVENTS=no
  check_libs tools/gpu/run_line_rate.sh "$root"/bin/*
  { nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | head -1 || true
    echo "cores: $(nproc)"; grep -m1 "model name" /proc/cpuinfo || true; } | tee "$out/machine.txt"
  local rc=0 builds=(bin)
  [ -x "$root/base/kvtd" ] && builds=(base bin)
  if [ "${KVT_LR_TESTS:-0}" = 1 ] && [ -x "$root/tests/codec_cuda_test" ]; then
    echo "== codec_cuda_test"
    "$root/tests/codec_cuda_test" >"$out/codec_cuda_test.log" 2>&1 || { rc=1; echo "FAILED: codec_cuda_test"; }
    grep -E "^\[  (PASSED|FAILED) |^\[  FAILED  \]" "$out/codec_cuda_test.log" || true
  fi
  # KVT_LR_RUNS: "path:tokens[:schemes] ..." (e.g. "gpu:8192 host:8192 gpu:32768:int8,lynx"); else every path at
  # every token count.
  local runs="${KVT_LR_RUNS:-}"
  if [ -z "$runs" ]; then
    IFS=, read -r -a token_list <<<"${KVT_LR_TOKENS:-8192}"
    for tokens in "${token_list[@]}"; do
      for path in ${KVT_LR_PATHS:-gpu host}; do runs="$runs $path:$tokens"; done
    done
  fi
  for run in $runs; do
    IFS=: read -r path tokens schemes extra <<<"$run"
    for b in "${builds[@]}"; do
      KVT_LR_SCHEMES="${schemes:-${KVT_LR_SCHEMES:-int8,int4,lynx}}" demo "$root/$b" "$b" "$path" "$tokens" "$extra" ||
        rc=1
    done
  done
  python3 "$root/line_rate_summary.py" "$out"/*.json | tee "$out/summary.txt" || rc=1
  cp -f "$out/summary.txt" "$final/"
  tar -C "$out" -czf "$final/line_rate.tar.gz" .
  return $rc
}

case "${1:-}" in
  prepare) prepare ;;
  device) device ;;
  *) sed -n '2,16p' "$0"; exit 2 ;;
esac
