#!/usr/bin/env bash
# Bazel test wrapper of kvt's pytest suites (//client/python:python_client_test, //engine:engine_test):
#   run_suite.sh SUITE_DIR [pytest args...]      e.g. run_suite.sh engine
# Lays the suite, the kvt client package and the protos out of the read-only runfiles as in a checkout, generates
# the client's gRPC stubs there (build_stubs.py, as a pip build would), and runs the suite's tests/ against kvtd
# (and kvtctl, as $KVT_KVTCTL; the collectives' library, as $KVT_COLLECTIVE_LIB) from the runfiles, writing JUnit XML where Bazel collects it (CI counts its cases).
# The interpreter is $KVT_PYTHON (./kvt test passes its venv's with --test_env), else Debian's /usr/bin/python3; it
# must have what the suite imports (grpcio, protobuf, numpy, pytest; the engine's gguf and tokenizers).
set -euo pipefail

suite="$1"
shift
py="${KVT_PYTHON:-/usr/bin/python3}"
if [[ -z "${KVT_PYTHON:-}" ]]; then
  echo "note: KVT_PYTHON is not set, so this runs Debian's /usr/bin/python3; './kvt test' passes its venv (with the" \
    "engine's gguf and tokenizers), or add --test_env=KVT_PYTHON=\$HOME/.cache/kvt/venv/bin/python" >&2
fi
runfiles="${TEST_SRCDIR}/${TEST_WORKSPACE}"
checkout="${TEST_TMPDIR}/checkout"
rm -rf "${checkout}"
mkdir -p "${checkout}/client" "${checkout}/proto/kvt" "$(dirname "${checkout}/${suite}")"
cp -rL "${runfiles}/client/python" "${checkout}/client/python"
cp -rL "${runfiles}/proto/kvt/v1" "${checkout}/proto/kvt/v1"
[[ "${suite}" == client/python ]] || cp -rL "${runfiles}/${suite}" "${checkout}/${suite}"
chmod -R u+w "${checkout}"

"${py}" "${checkout}/client/python/build_stubs.py"
cd "${checkout}/${suite}"
export PYTHONPATH="${checkout}/client/python:${checkout}/${suite}${PYTHONPATH:+:${PYTHONPATH}}"
[[ -x "${runfiles}/tools/kvtctl/kvtctl" ]] && export KVT_KVTCTL="${runfiles}/tools/kvtctl/kvtctl"
[[ -f "${runfiles}/collective/libkvt_collective.so" ]] &&
  export KVT_COLLECTIVE_LIB="${runfiles}/collective/libkvt_collective.so"
exec "${py}" -m pytest -q -p no:cacheprovider --junitxml="${XML_OUTPUT_FILE:-${TEST_TMPDIR}/pytest.xml}" \
  --kvtd="${runfiles}/server/kvtd" tests "$@"
