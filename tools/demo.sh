#!/usr/bin/env bash
# The whole job from nothing: installs keras-transformer (with its onnx-text
# extra) into .venv, makes sure the German-English Ding dictionary (Debian's
# trans-de-en) is there when the dataset is "ding" (the default), then runs
# examples/demo.py with the arguments given (see `bash tools/demo.sh --help`).
set -euo pipefail
cd "$(dirname "$0")/.."

dataset=ding
previous=""
help=no
for argument in "$@"; do
    if [ "$previous" = "--dataset" ]; then dataset=$argument; fi
    case "$argument" in
        --dataset=*) dataset=${argument#--dataset=} ;;
        -h|--help) help=yes ;;
    esac
    previous=$argument
done

if [ "$dataset" = "ding" ] && [ "$help" = no ] && [ ! -f /usr/share/trans/de-en ]; then
    echo "The Ding dictionary (/usr/share/trans/de-en) is missing; installing trans-de-en ..."
    if [ "$(id -u)" = 0 ] && command -v apt-get > /dev/null; then
        apt-get update -qq && apt-get install -y -qq trans-de-en > /dev/null
    elif command -v sudo > /dev/null && command -v apt-get > /dev/null; then
        sudo apt-get update -qq && sudo apt-get install -y -qq trans-de-en > /dev/null
    else
        echo "Cannot install it here. On Debian or Ubuntu run: sudo apt-get install trans-de-en" >&2
        exit 1
    fi
fi

# The onnx-text extra (onnxruntime-extensions) runs translate.onnx, which the
# demo's export writes and checks.
echo "Setting up .venv (pip install -e '.[onnx-text]') ..."
python3 -m venv .venv
.venv/bin/python -m pip install --quiet --upgrade pip
.venv/bin/python -m pip install --quiet -e ".[onnx-text]"
exec .venv/bin/python examples/demo.py "$@"
