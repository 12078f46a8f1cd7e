#!/usr/bin/env bash
# Bazel test wrapper of the engine's pytest suite (//engine:engine_test). Lays the engine, the kvt client package
# and the protos out of the read-only runfiles as in a checkout, generates the client's gRPC stubs there, and runs
# pytest against kvtd from the runfiles, writing JUnit XML where Bazel collects it. The interpreter is
# $KVT_PYTHON (./kvt test passes its venv's, which has gguf and tokenizers), else Debian's /usr/bin/python3. The
# model is read from ~/.cache/kvt (./kvt fetches it before Bazel runs); tests that need it skip without it.
set -euo pipefail

py="${KVT_PYTHON:-/usr/bin/python3}"
runfiles="${TEST_SRCDIR}/${TEST_WORKSPACE}"
checkout="${TEST_TMPDIR}/checkout"
rm -rf "${checkout}"
mkdir -p "${checkout}/client" "${checkout}/proto/kvt"
cp -rL "${runfiles}/engine" "${checkout}/engine"
cp -rL "${runfiles}/client/python" "${checkout}/client/python"
cp -rL "${runfiles}/proto/kvt/v1" "${checkout}/proto/kvt/v1"
chmod -R u+w "${checkout}"

"${py}" "${checkout}/client/python/build_stubs.py"
cd "${checkout}/engine"
export PYTHONPATH="${checkout}/client/python:${checkout}/engine${PYTHONPATH:+:${PYTHONPATH}}"
exec "${py}" -m pytest -q -p no:cacheprovider --junitxml="${XML_OUTPUT_FILE:-${TEST_TMPDIR}/pytest.xml}" \
  --kvtd="${runfiles}/server/kvtd" tests "$@"
