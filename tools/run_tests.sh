#!/usr/bin/env bash
# Runs the test suite from nothing: creates .venv, installs keras-transformer
# with its test dependencies into it, then runs pytest: the main suite on
# TensorFlow, then tests/backends (the layers and the model) once per Keras
# backend, each in its own process with KERAS_BACKEND set. Extra arguments
# are passed to every pytest run (`-k attention`); BACKENDS="jax" (or "",
# for the main run alone, e.g. with a test file as argument) chooses the
# backend runs. Each pytest run spreads the test files over
# TEST_WORKERS processes (pytest-xdist; default 2, the cores CI has; 0 runs
# in this process). Needs only Python 3.11 and pip.
set -euo pipefail
cd "$(dirname "$0")/.."
python3 -m venv .venv
.venv/bin/python -m pip install --quiet --upgrade pip
.venv/bin/python -m pip install --quiet -e ".[test]"

# Every run goes ahead even if one before it failed; the script fails if any
# did. pytest's exit status 5 (no test selected) counts as a pass when the
# arguments did the selecting.
failed=0
run() {
    local status=0
    "$@" || status=$?
    if [[ $status -ne 0 && ! ( $status -eq 5 && $arguments -gt 0 ) ]]; then
        failed=1
    fi
}
arguments=$#
# A test file's tests stay in one worker, so its module fixtures are built once.
workers=(--numprocesses "${TEST_WORKERS-2}" --dist loadfile)

# --durations: where the suite's time goes, at the end of the log.
run env KERAS_BACKEND=tensorflow .venv/bin/python -m pytest "${workers[@]}" --durations=25 "$@"
for backend in ${BACKENDS-jax torch tensorflow}; do
    echo "== tests/backends on the Keras backend $backend"
    run env KERAS_BACKEND="$backend" .venv/bin/python -m pytest "${workers[@]}" tests/backends "$@"
done
exit $failed
