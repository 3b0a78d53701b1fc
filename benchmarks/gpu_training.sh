#!/usr/bin/env bash
# The training-speed checks on a GPU machine that has JAX and PyTorch but no
# TensorFlow or Keras, in one go (docs/benchmarks.md, "On JAX and on GPUs"):
# Keras and its two missing dependencies from wheels in .whl/, then
#   ours:        ours against torch.compile at base 400 and big 400 rows of
#                64 + 64 tokens, a profile of base 400 (trace and HLO) and
#                the loop around the step;
#   before:      the step as it was before the current changes (a checkout
#                of that commit's keras_transformer/ and benchmarks/ in
#                .baseline/, if there), at the same two sizes;
#   batch-sizes: ours alone at base 200 and 800 rows (torch.compile's
#                compilations take most of the 15 minutes a session is lent
#                a GPU);
#   ablations:   base 400 without dropout, and with XLA's Triton matmuls off.
# Each part has its own time limit, so that one that runs long leaves the
# rest their turn; logs go to $OUT (or ./gpu-logs). The first three parts
# take about 9 minutes; name the parts to run,
#   bash benchmarks/gpu_training.sh [ours] [before] [batch-sizes] [ablations]
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-gpu-logs}
mkdir -p "$out/profile"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:. PYTHONUNBUFFERED=1 KERAS_BACKEND=jax
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm --format=csv,noheader
bench() {  # LIMIT LOG ARGS...: one part, its output also in $out/LOG
    local limit=$1 log=$2
    shift 2
    echo "== $log: $*"
    timeout "$limit" python3 benchmarks/train_throughput.py --backend jax --steps 6 "$@" \
        2>&1 | grep -v "^W0000\|^I0000\|^WARNING: All log" | tee "$out/$log.txt"
}
parts=" ${*:-ours before batch-sizes} "
if [[ $parts == *" ours "* ]]; then
    bench 290 ours --sizes base:400,big:400 --profile "$out/profile" --loop
    gzip -f "$out/profile/update.hlo.txt"
    # The trace (the profiler writes it four folders down) beside the HLO.
    find "$out/profile" -name perfetto_trace.json.gz -exec cp {} "$out/profile/trace.json.gz" \;
    rm -rf "$out/profile/plugins"
fi
if [[ $parts == *" before "* && -d .baseline ]]; then
    (cd .baseline && PYTHONPATH=/tmp/site:. bench 120 before --sizes base:400,big:400 --no-torch)
fi
if [[ $parts == *" batch-sizes "* ]]; then
    bench 120 batch-sizes --sizes base:200,base:800 --no-torch
fi
if [[ $parts == *" ablations "* ]]; then
    bench 70 no-dropout --sizes base:400 --no-torch --dropout 0
    XLA_FLAGS=--xla_gpu_enable_triton_gemm=false bench 70 no-triton-gemm --sizes base:400 --no-torch
fi
