#!/usr/bin/env bash
# Runs the test suite from nothing: creates .venv, installs keras-transformer
# with its test dependencies into it, then runs pytest (extra arguments are
# passed to pytest). Needs only Python 3.11 and pip.
set -euo pipefail
cd "$(dirname "$0")/.."
python3 -m venv .venv
.venv/bin/python -m pip install --quiet --upgrade pip
.venv/bin/python -m pip install --quiet -e ".[test]"
.venv/bin/python -m pytest "$@"
