#!/usr/bin/env bash
# Reproduces the paper's WMT14 English-German runs (Vaswani et al. 2017,
# Table 2: base 27.3 BLEU, big 28.4 BLEU on newstest2014) on one machine with
# several GPUs. Needs internet on first use: TFDS downloads and prepares WMT14
# (about 4.5M sentence pairs) into --data-dir.
#
#   bash examples/wmt14_en_de.sh base runs/wmt14-base   # 100k steps
#   bash examples/wmt14_en_de.sh big  runs/wmt14-big    # 300k steps
#
# The paper's batch is about 25,000 source and 25,000 target tokens per
# update, spread over 8 GPUs. With G GPUs the script accumulates 8/G
# micro-batches per update, so that each GPU holds the paper's per-GPU share
# (about 3,100 tokens per side) and the update is the paper's whatever G is.
# Checkpoints every 10 minutes (not by steps); the last 5 (base) or 20
# (big) are averaged, as in the paper. Evaluation: beam 4, length penalty
# 0.6, input length + 50, sacreBLEU on newstest2014 (the TFDS test split).
# sacreBLEU is detokenized BLEU; the paper's tokenized BLEU is about one
# point higher for the same output.
set -euo pipefail
preset=${1:?usage: wmt14_en_de.sh base|big OUTPUT_DIR}
output=$(realpath -m "${2:?usage: wmt14_en_de.sh base|big OUTPUT_DIR}")
gpus=$(python - <<'PY'
import tensorflow as tf
print(max(1, len(tf.config.list_physical_devices("GPU"))))
PY
)
accumulate=$(( 8 / gpus > 0 ? 8 / gpus : 1 ))
cd "$(dirname "$0")/.."
python examples/train.py --output "$output" --preset "$preset" \
    --dataset wmt14_translate/de-en --source-language en --target-language de \
    --vocab-size 37000 --batch-tokens 25000 --accumulate "$accumulate" \
    --strategy mirrored --precision mixed_float16 \
    --checkpoint-every-steps 0 --checkpoint-every-minutes 10 --eval-every-steps 5000 --bleu-sentences 500
python examples/evaluate.py "$output" --split test
