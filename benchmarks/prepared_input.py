"""Training input alone: target tokens per second from prepared shards
(`train.py --dataset prepared:DIR`) against on-the-fly tokenization
(`--dataset ding`), side by side in turns.

    apt-get install trans-de-en            # the Ding dictionary
    pip install -e ".[beam]"
    python benchmarks/prepared_input.py [--work /tmp/corpus-bench] [--repeats 3]

Both pipelines are built as `training/run.py` builds them for the small
preset on Ding (2,048-token batches, max_length 64, a 20,000-pair shuffle
buffer, an 8,000-piece SentencePiece model that the first run trains into
--work, with the shards `prepare_data.py` writes there): on the fly, the TFDS
records are tokenized by tf-text inside `tf.data` (training caches the ids
after its first pass over the data, so this is the speed of every pass of a
run that sees its data once, and of each worker of a multi-worker run);
prepared, the shards' ids are parsed and batched. Each turn builds a fresh
pipeline, reads `--warmup` batches (the shuffle buffer fills), then times
the next `--batches`; the figure is the median over `--repeats` turns of
target tokens (labels that are not padding) a second.
"""

import argparse
import os
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402

from common import ding_work_folder, machine  # noqa: E402


def on_the_fly(tokenizer, config, seed):
    from keras_transformer import data

    encoded = data.encode_pairs(data.corpus("ding").pairs("train"), tokenizer)
    return data.token_batches(encoded.repeat(), config.batch_tokens, config.max_length,
                              shuffle_buffer=20_000, seed=seed, pad_id=config.pad_id)


def prepared(prepared_dir, config, seed):
    import tensorflow as tf

    from keras_transformer import data

    corpus = data.corpus(f"prepared:{prepared_dir}")
    make = corpus.training_input(config.batch_tokens, config.max_length, 20_000, seed,
                                 pad_id=config.pad_id)
    return make(tf.distribute.InputContext())


def tokens_per_second(batches, warmup, count):
    iterator = iter(batches.prefetch(2))
    for _ in range(warmup):
        next(iterator)
    start, tokens = time.perf_counter(), 0
    for _ in range(count):
        _, labels = next(iterator)
        tokens += int(np.count_nonzero(labels.numpy()))
    return tokens / (time.perf_counter() - start)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--work", default="/tmp/corpus-bench", help="tokenizer and shards")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--warmup", type=int, default=30)
    parser.add_argument("--batches", type=int, default=300)
    args = parser.parse_args()

    tokenizer_dir, prepared_dir = ding_work_folder(args.work)
    from keras_transformer import data
    from keras_transformer.models import SMALL

    tokenizer = data.load_tokenizer(tokenizer_dir)
    contenders = {"on the fly (tf-text in tf.data)": lambda seed: on_the_fly(tokenizer, SMALL, seed),
                  "prepared shards": lambda seed: prepared(prepared_dir, SMALL, seed)}
    rates = {name: [] for name in contenders}
    for turn in range(args.repeats):
        for name, make in contenders.items():
            rates[name].append(tokens_per_second(make(turn), args.warmup, args.batches))
            print(f"turn {turn + 1}: {name}: {rates[name][-1]:,.0f} target tokens/s", flush=True)
    medians = {name: float(np.median(values)) for name, values in rates.items()}
    baseline = medians["on the fly (tf-text in tf.data)"]
    print(f"\n{machine()}; {args.batches} batches of the small preset a turn, median of "
          f"{args.repeats} turns\n")
    print("| input pipeline | target tokens/s | x |\n|---|---|---|")
    for name, rate in medians.items():
        print(f"| {name} | {rate:,.0f} | {rate / baseline:.2f} |")


if __name__ == "__main__":
    main()
