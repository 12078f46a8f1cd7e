# Sourced by the tools/gpu/run_*.sh scripts: what a binary built here needs to run on a GPU machine that has no
# Bazel and no network.

# copy_needed_libs DEST FILE...: copies every shared library the files resolve to, except the C runtime and
# libstdc++/libgcc (the GPU machine's newer Ubuntu has them), into DEST.
copy_needed_libs() {
  local dest="$1"
  shift
  ldd "$@" | awk '/=> \// {print $3}' | sort -u | while read -r lib; do
    case "$(basename "$lib")" in
      libc.so.*|libm.so.*|libdl.so.*|librt.so.*|libpthread.so.*|ld-linux*|libstdc++.so.*|libgcc_s.so.*) ;;
      *) cp -fL "$lib" "$dest/" ;;
    esac
  done
}

# check_libs SCRIPT FILE...: fails, naming them, when a file's libraries are missing here.
check_libs() {
  local script="$1"
  shift
  if ldd "$@" | grep -q "not found"; then
    ldd "$@" | grep "not found"
    echo "missing libraries: run '$script prepare' on the build machine" >&2
    return 1
  fi
}

# carry_ucx DIR FILE...: what binaries that use UCX need on the GPU machine: UCX's transport modules, which it
# loads at run time (those this build's UCX has, without RDMA libraries: loopback runs need none), into DIR/lib/ucx,
# and every shared library the files and the modules need into DIR/lib. Point UCX_MODULE_DIR at DIR/lib/ucx there.
carry_ucx() {
  local dir="$1"
  shift
  mkdir -p "$dir/lib/ucx"
  cp -fL /usr/lib/x86_64-linux-gnu/ucx/libuct_cma.so.0 "$dir/lib/ucx/libuct_cma.so.0"
  ln -sf libuct_cma.so.0 "$dir/lib/ucx/libuct_cma.so"
  copy_needed_libs "$dir/lib" "$@" "$dir"/lib/ucx/*.so.0
}

# kvt_binaries DIR: prints a folder holding kvtd and kvtctl: $KVT_BIN_DIR when set, else an opt build copied into
# DIR (bazel-bin moves with the next build's configuration). Bazel's output goes to stderr.
kvt_binaries() {
  if [[ -n "${KVT_BIN_DIR:-}" ]]; then
    echo "$KVT_BIN_DIR"
    return
  fi
  local out
  bazel build -c opt //server:kvtd //tools/kvtctl:kvtctl >&2
  out="$(bazel info -c opt bazel-bin 2>/dev/null)"
  mkdir -p "$1" && cp -f "$out/server/kvtd" "$out/tools/kvtctl/kvtctl" "$1/"
  echo "$1"
}
