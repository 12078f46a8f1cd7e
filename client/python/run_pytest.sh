#!/usr/bin/env bash
# Bazel test wrapper of the Python client's pytest suite (//client/python:python_client_test).
# Copies the package and the protos out of the read-only runfiles into the checkout's layout, generates the gRPC
# stubs there (build_stubs.py, as a pip build would), and runs pytest against kvtd and kvtctl from the runfiles,
# writing JUnit XML where Bazel collects it. The interpreter is $KVT_PYTHON (./kvt test passes its venv's with
# --test_env), else Debian's /usr/bin/python3; it must have grpcio, protobuf, numpy and pytest (torch optional).
set -euo pipefail

py="${KVT_PYTHON:-/usr/bin/python3}"
runfiles="${TEST_SRCDIR}/${TEST_WORKSPACE}"
checkout="${TEST_TMPDIR}/checkout"
rm -rf "${checkout}"
mkdir -p "${checkout}/client" "${checkout}/proto/kvt"
cp -rL "${runfiles}/client/python" "${checkout}/client/python"
cp -rL "${runfiles}/proto/kvt/v1" "${checkout}/proto/kvt/v1"
chmod -R u+w "${checkout}"

"${py}" "${checkout}/client/python/build_stubs.py"
cd "${checkout}/client/python"
exec "${py}" -m pytest -q -p no:cacheprovider --junitxml="${XML_OUTPUT_FILE:-${TEST_TMPDIR}/pytest.xml}" \
  --kvtd="${runfiles}/server/kvtd" --kvtctl="${runfiles}/tools/kvtctl/kvtctl" tests "$@"
