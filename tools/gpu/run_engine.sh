#!/usr/bin/env bash
# The reference engine on a GPU machine (issue 34): SmolLM2-135M in PyTorch, KV caches in GPU memory registered
# with two kvtd (CUDA IPC), 8000-token prompts of real text, schemes bf16,int8,int4,lynx over a rate-limited link;
# then the real KV's codec fidelity (kvtctl codec eval) and the batched-vs-single-step drift per dtype.
#
#   tools/gpu/run_engine.sh prepare   # here: kvtd/kvtctl + their libraries, the gguf wheel, the kvt stubs, the
#                                     # prompts' documents and the model, into .gpu-engine/ (git-ignored)
#   tools/gpu/run_engine.sh stage     # there, call 1: checks the first half of the model arrived (nothing else)
#   tools/gpu/run_engine.sh device    # there, call 2: everything; output under $OUT (default .gpu-engine/out)
#   tools/gpu/run_engine.sh prefill-timing  # there, instead of call 2: the prefill alone, no kvt (seconds)
#
# The model (94 MiB) and the rest do not fit one call's 64 MiB, so they travel in two calls on the same machine,
# the second made at once after the first (a machine stays warm ~30 s; ignored files a call left stay there):
#   run(kind="nvidia-h200", carry=[".gpu-engine/part1"], command="bash tools/gpu/run_engine.sh stage", timeout_s=120)
#   run(carry=[".gpu-engine/part2"], command="bash tools/gpu/run_engine.sh device", timeout_s=600)
# If the machine went back in between, device says so: run both again.
#
# Environment (all optional): KVT_BIN_DIR: take kvtd and kvtctl from this folder instead of building them;
# KVT_ENGINE_ARGS / KVT_TIES_ARGS: extra flags for the sweep / the ties step (later flags win);
# KVT_ENGINE_DEVICE: cuda:0 unless set (a dry run of `device` on a CPU machine: cpu, with small KVT_*_ARGS).
set -euo pipefail
cd "$(dirname "$0")/../.."
source tools/gpu/carry_libs.sh
DIR=.gpu-engine
DOCS=/usr/share/doc/python3.11/html/_sources
PART1_MIB=50
RATE_GBPS=1   # docs/ENGINE.md, "GPU sweep": at 1 Gbit/s an 8k-token bf16 KV takes ~1.5 s, ~180x a decode step

prepare() {
  local bin
  bin="$(kvt_binaries /tmp/kvt-engine-bin)"
  local model
  model="$(./kvt engine fetch)"  # the engine's own cache path (fetches once; prints where the model is)
  rm -rf "$DIR"
  mkdir -p "$DIR/part1" "$DIR/part2" "$DIR/stage/bin" "$DIR/stage/lib"
  # kvtd and kvtctl with their shared libraries, compressed (37 MB -> ~10 MB).
  cp -f "$bin/kvtd" "$bin/kvtctl" "$DIR/stage/bin/"
  chmod u+w "$DIR"/stage/bin/*
  strip "$DIR"/stage/bin/*
  carry_ucx "$DIR/stage" "$DIR"/stage/bin/*
  tar -C "$DIR/stage" -cf - bin lib | xz -T0 -6 > "$DIR/part2/bin.tar.xz"
  # The kvt client's gRPC stubs (generated here; the GPU machine has no protoc) and the gguf wheel (the image has
  # numpy, pyyaml, tqdm and tokenizers already).
  /usr/bin/python3 client/python/build_stubs.py --out "$DIR/stage/_proto"
  tar -C "$DIR/stage" -cf "$DIR/part2/stubs.tar" _proto
  /usr/bin/python3 -m pip download -q --no-deps --only-binary=:all: -d "$DIR/part2" \
    "$(grep -E '^gguf==' engine/requirements.txt)"
  # The prompts: Debian's python3.11-doc reST sources (12 MB -> ~3 MB).
  tar -C "$(dirname "$DOCS")" -cf - "$(basename "$DOCS")" | xz -T0 -6 > "$DIR/part2/docs.tar.xz"
  # The model, in two parts.
  head -c $((PART1_MIB * 1024 * 1024)) "$model" > "$DIR/part1/model.part1"
  tail -c +$((PART1_MIB * 1024 * 1024 + 1)) "$model" > "$DIR/part2/model.part2"
  sha256sum < "$model" | cut -d' ' -f1 > "$DIR/part2/model.sha256"
  rm -rf "$DIR/stage"
  du -sh "$DIR/part1" "$DIR/part2"
}

stage() {
  [[ -f "$DIR/part1/model.part1" ]] || { echo "no $DIR/part1/model.part1: carry .gpu-engine/part1" >&2; exit 1; }
  echo "part 1 of the model is here ($(du -h "$DIR/part1/model.part1" | cut -f1))."
  echo "now, at once: tools/gpu/run_engine.sh device (carry .gpu-engine/part2)"
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv || true
}

# The model reassembled, kvtd/kvtctl, the documents, the stubs and the gguf wheel in place; the environment set.
setup() {
  local out="$1" work="$2"
  mkdir -p "$out" "$work"
  if [[ ! -f "$DIR/part1/model.part1" ]]; then
    echo "error: $DIR/part1/model.part1 is missing: this machine did not run 'stage'" \
      "(it was given back in between)." >&2
    echo "make the two calls again, the second at once after the first (see the top of this script)." >&2
    exit 3
  fi
  cat "$DIR/part1/model.part1" "$DIR/part2/model.part2" > "$work/model.gguf"
  [[ "$(sha256sum < "$work/model.gguf" | cut -d' ' -f1)" == "$(cat "$DIR/part2/model.sha256")" ]] \
    || { echo "error: the reassembled model's sha256 differs (parts from two prepares?)" >&2; exit 3; }
  xz -dc "$DIR/part2/bin.tar.xz" | tar -C "$work" -xf -
  xz -dc "$DIR/part2/docs.tar.xz" | tar -C "$work" -xf -
  rm -rf client/python/kvt/_proto && tar -C client/python/kvt -xf "$DIR/part2/stubs.tar"
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site \
    "$DIR"/part2/gguf-*.whl
  export PYTHONPATH="/tmp/site:$PWD/client/python:$PWD/engine" PYTHONUNBUFFERED=1
  export LD_LIBRARY_PATH="$work/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" UCX_MODULE_DIR="$work/lib/ucx"
  check_libs tools/gpu/run_engine.sh "$work"/bin/*
  {
    nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv || true
    echo "cores: $(nproc)"
    python3 -c 'import torch, grpc, google.protobuf as pb, tokenizers, gguf, kvt
print("torch", torch.__version__, "cuda", torch.cuda.is_available(), "grpc", grpc.__version__,
      "protobuf", pb.__version__, "tokenizers", tokenizers.__version__)' || echo "error: an import failed (above)"
  } 2>&1 | tee "$out/device.txt"
}

# The prefill alone (no kvt): what the sweep's offers owe the model (docs/ENGINE.md, "Where lynx's TTFT goes").
prefill_timing() {
  local out="${OUT:-$DIR/out}" work=/tmp/kvt-engine
  setup "$out" "$work"
  python3 -m kvt_engine.cli prefill-timing --model "$work/model.gguf" --docs "$work/_sources" \
    --device "${KVT_ENGINE_DEVICE:-cuda:0}" --prompt-tokens 8000 --repeats 5 2>&1 | tee "$out/prefill_timing.txt"
}

device() {
  local out="${OUT:-$DIR/out}" work=/tmp/kvt-engine
  setup "$out" "$work"
  local py=(python3 -m kvt_engine.cli) dev="${KVT_ENGINE_DEVICE:-cuda:0}" rc=0
  # 1. The sweep: 20+ prompts of 8000 tokens (+ 64 generated or 128 held-out ones stay inside SmolLM2's 8192-token
  #    context), four schemes, KV in GPU regions (~4-5 min; the runner starts no prompt after --max-seconds and
  #    the table says how many ran).
  # shellcheck disable=SC2086
  "${py[@]}" --model "$work/model.gguf" --kvtd "$work/bin/kvtd" --kvtctl "$work/bin/kvtctl" --docs "$work/_sources" \
    --device "$dev" --prompt-tokens 8000 --new-tokens 64 --schemes bf16,int8,int4,lynx --rate-gbps "$RATE_GBPS" \
    --prompts 24 --heldout-tokens 128 --ppl-prompts 4 --dump-kv "$work/dumps" --dump-prompts 3 --max-seconds 300 \
    --out "$out/engine.json" -v ${KVT_ENGINE_ARGS:-} > "$out/engine.txt" 2> "$work/engine.log" || rc=1
  tail -n 60 "$work/engine.log" > "$out/engine-log-tail.txt"
  cat "$out/engine.txt" "$out/engine-log-tail.txt"
  # 2. The real KV's fidelity, every scheme and stage, 8 layers of each dumped prompt.
  for f in "$work"/dumps/*.npy; do
    [[ -f "$f" ]] || continue
    echo "== $(basename "$f")"
    "$work/bin/kvtctl" codec eval --in "$f" --gqa-group 3 --layers 8 --progress=false || rc=1
  done 2>&1 | tee "$out/fidelity.txt"
  # 3. Batched verification vs single steps, per compute dtype, on this device.
  # shellcheck disable=SC2086
  "${py[@]}" ties --model "$work/model.gguf" --docs "$work/_sources" --device "$dev" --prompts 4 \
    --prompt-tokens 8000 --new-tokens 64 --dtypes float64,float32,bfloat16 ${KVT_TIES_ARGS:-} 2>&1 \
    | tee "$out/ties.txt" || rc=1
  return $rc
}

case "${1:-}" in
  prepare) prepare ;;
  stage) stage ;;
  device) device ;;
  prefill-timing) prefill_timing ;;
  *) sed -n '2,22p' "$0"; exit 2 ;;
esac
