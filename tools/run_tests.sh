#!/usr/bin/env bash
# Runs the test suite from nothing: creates .venv, installs keras-transformer
# with its test dependencies into it (with uv), then runs pytest: the main suite on
# TensorFlow, and tests/backends (the layers and the model) once per Keras
# backend, each in its own process with KERAS_BACKEND set.
#
#   bash tools/run_tests.sh              everything (what CI runs)
#   bash tools/run_tests.sh --quick      the tests not marked slow: every module, in minutes
#
# Extra arguments are passed to every pytest run (`-k attention`);
# BACKENDS="jax" (or "", for the main run alone, e.g. with a test file as
# argument) chooses the backend runs. The main run spreads the test files
# over TEST_WORKERS processes (pytest-xdist; default 2, the cores CI has; 0
# runs in this process); the backend runs go one after another beside it
# (see below). Needs only Python 3.11 and pip. docs/development.md says more.
set -euo pipefail
cd "$(dirname "$0")/.."
tier=()
default_backends="jax torch tensorflow"
if [[ "${1-}" == "--quick" ]]; then
    shift
    tier=(-m "not slow")
    # The main run covers TensorFlow: the quick tier's backend runs are the others.
    default_backends="jax torch"
fi
python3 -m venv .venv
# uv installs the same requirements as pip in about 60% of pip's time (it
# downloads and unpacks in parallel): minutes of the suite's budget on CI.
# It reads no pip configuration, so pip's local wheel folder (where a
# machine keeps PyTorch's CPU build) is handed on.
.venv/bin/python -m pip install --quiet uv
links=()
for link in ${PIP_FIND_LINKS-}; do
    links+=(--find-links "$link")
done
.venv/bin/python -m uv pip install --quiet --python .venv/bin/python "${links[@]}" -e ".[test]"

# The peers the slow tests check the server against, besides the Python
# clients in .[test]: LibreTranslate itself, in a virtual environment of its
# own (it pins Flask, requests and others that ours need not share;
# tests/helpers/libretranslate.py), and the npm clients `libretranslate` and
# DeepL's `deepl-node`, where npm is (.ci/run installs it). The quick tier
# runs none of them. (DeepL's mock server is on no registry: see
# tests/helpers/deepl_mock.py.)
if [[ ${#tier[@]} -eq 0 ]]; then
    [[ -x .venv-libretranslate/bin/python ]] || python3 -m venv .venv-libretranslate
    .venv/bin/python -m uv pip install --quiet --python .venv-libretranslate/bin/python \
        "${links[@]}" libretranslate==1.9.6
    if command -v npm > /dev/null && [[ ! -d .node/node_modules/libretranslate
                                        || ! -d .node/node_modules/deepl-node ]]; then
        npm install --prefix .node --no-audit --no-fund --loglevel=error libretranslate@1.0.1 \
            deepl-node@1.28.0 > /dev/null
    fi
fi

# Bytecode: every test process that found none would parse the sources it
# imports anew (TensorFlow, JAX, PyTorch and transformers: about twice the
# CPU of a process with bytecode), and compiling all of every package at
# install compiles much that no test imports. Instead, .venv (this script's
# own) writes the bytecode of what is imported, when it is first imported,
# even where the machine sets PYTHONDONTWRITEBYTECODE; two processes
# importing what nearly every test process does write most of it first.
unset PYTHONDONTWRITEBYTECODE
.venv/bin/python -c "import keras_transformer.export.exporter, keras_transformer.training" \
    > /dev/null 2>&1 &
.venv/bin/python -c "import jax, apache_beam, ctranslate2, onnxruntime
from transformers import FSMTForConditionalGeneration, MarianMTModel" > /dev/null 2>&1 &
wait

# Every run goes ahead even if one before it failed; the script fails if any
# did. pytest's exit status 5 (no test selected) counts as a pass when the
# arguments did the selecting.
failed=0
arguments=$#
check() {
    local status=$1
    if [[ $status -ne 0 && ! ( $status -eq 5 && $arguments -gt 0 ) ]]; then
        failed=1
    fi
}

# With the main run's workers and the backend runs beside them, PyTorch's
# OpenMP threads (in the PyTorch backend run and in the processes the tests
# start, which inherit this) would wait for work by spinning on cores that
# other processes need. TensorFlow's two thread pools (between operations
# and within one) likewise: the tests' models are so small that handing
# their operations between threads costs more than it spreads (measured:
# docs/benchmarks-log.md, "The test suite's time"). A user's own setting is
# kept.
export OMP_NUM_THREADS=${OMP_NUM_THREADS-1}
export TF_NUM_INTEROP_THREADS=${TF_NUM_INTEROP_THREADS-1}
export TF_NUM_INTRAOP_THREADS=${TF_NUM_INTRAOP_THREADS-1}

# The backend runs, one after another, each into its own log, go beside the
# main run, not after it: one more process on the cores fills the time the
# main run's workers leave them idle (waiting on a process, a server or a
# browser, and at the end, when one worker has no file left), and no run
# waits for the last one of the other kind to end.
logs=$(mktemp -d)
trap 'rm -rf "$logs"' EXIT
backends=(${BACKENDS-$default_backends})
(
    for backend in "${backends[@]}"; do
        status=0
        env KERAS_BACKEND="$backend" .venv/bin/python -m pytest --numprocesses 0 tests/backends \
            "${tier[@]}" "$@" > "$logs/$backend" 2>&1 || status=$?
        echo "$status" > "$logs/$backend.status"
    done
) &
backend_runs=$!

# A test file's tests stay in one worker, so its module fixtures are built
# once. The workers take the files in the order tests/conftest.py gives
# them (`pytest_collection_modifyitems`): most tests first, as
# pytest-xdist's own order, except the few files of few but long tests,
# which go first, so that the run does not end with one of them on one core
# while the other has nothing left.
# --durations: where the suite's time goes, at the end of the log.
status=0
env KERAS_BACKEND=tensorflow .venv/bin/python -m pytest \
    --numprocesses "${TEST_WORKERS-2}" --dist loadfile --no-loadscope-reorder --durations=25 \
    "${tier[@]}" "$@" || status=$?
check $status

wait $backend_runs
for backend in "${backends[@]}"; do
    echo "== tests/backends on the Keras backend $backend"
    cat "$logs/$backend"
    check "$(cat "$logs/$backend.status")"
done
exit $failed
