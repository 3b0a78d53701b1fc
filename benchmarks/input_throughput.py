"""Training input alone: the real target tokens a second that `train`'s
input delivers, from the raw corpus (its first, tokenizing pass), from the
cache (every later pass) and from prepared shards (`--dataset prepared:DIR`),
on Ding's short pairs and on WMT-length text, with the share of real tokens
in the padded batches. So that a GPU user knows how many cores to give it:
the base model at 40% MFU on an H100 consumes about 1M target tokens a
second (docs/benchmarks.md).

    apt-get install trans-de-en            # the Ding dictionary
    pip install -e ".[beam]"               # prepares the shards
    python benchmarks/input_throughput.py [--work /tmp/input-bench] [--repeats 3]

Batches are the base preset's (25,000 tokens a side, max_length 256, a
20,000-pair shuffle buffer), padded as `train` pads them on TensorFlow (to
each batch's longest pair) and for XLA (JAX, `--xla`: a few fixed shapes).
WMT-length text is Ding's whole sentences joined four to a line (about 22
tokens a side, as WMT14's news sentences), eight groupings of them. The
tokenizer is an 8,000-piece SentencePiece model trained on Ding.

Beside train's input, "tf-text's op (before)" is the first pass as `train`
ran it before its tokenizer's batches went to the `sentencepiece` package's
own encoder (`data.tokenizer.input_tokenizer`): tf-text's
SentencepieceTokenizer op, tf.data's parallel calls. The before and after
of that change, in turns. "Tokenizing alone" is the first pass's
tokenizing without shuffling or batching (its 512-pair blocks): the
ceiling of the first pass, set by the tokenizer's speed on this CPU.
"Per CPU second" divides by the CPU time of all the process's threads
(which other jobs on the machine do not inflate): times the cores given to
the input, it is what an idle machine's cores deliver where the pipeline
keeps them busy. Each turn builds a fresh pipeline, reads `--warmup` batches (the
shuffle buffer fills), then times the next `--batches`; a figure is the
median over `--repeats` turns.
"""

import argparse
import os
import random
import tempfile
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402

from common import ding_work_folder, machine  # noqa: E402

SHUFFLE_BUFFER = 20_000  # train's default (RunOptions.shuffle_buffer)


def wmt_length_folder(work, groupings=8, per_line=4):
    """A TSV corpus folder of Ding's whole sentences joined `per_line` to a
    line, in `groupings` random groupings (made in `work` when missing)."""
    from keras_transformer import data

    folder = os.path.join(work, "wmt-length")
    if os.path.exists(os.path.join(folder, "train.tsv")):
        return folder
    os.makedirs(folder, exist_ok=True)
    sentences = [(s.decode(), t.decode()) for s, t in
                 data.corpus("ding").pairs("train").as_numpy_iterator()
                 if data.is_full_sentence(s.decode())]
    rng = random.Random(0)
    lines = []
    for _ in range(groupings):
        rng.shuffle(sentences)
        for start in range(0, len(sentences) - per_line + 1, per_line):
            group = sentences[start:start + per_line]
            lines.append(" ".join(s for s, _ in group) + "\t" + " ".join(t for _, t in group))
    for split, part in (("train", lines[200:]), ("validation", lines[:100]),
                        ("test", lines[100:200])):
        with open(os.path.join(folder, f"{split}.tsv"), "w") as file:
            file.writelines(line + "\n" for line in part)
    return folder


class TfTextTokenizer:
    """`tokenizer` with tf-text's op for every call: input pipelines use
    a tokenizer that is not a `data.Tokenizer` as it is (see
    `data.tokenizer.input_tokenizer`)."""

    def __init__(self, tokenizer):
        self.tokenize = self.tokenize_target = tokenizer.tokenize
        self.eos_id, self.bos_id = tokenizer.eos_id, tokenizer.bos_id


def pipelines(corpus, tokenizer, cached, prepared_dir, config, fixed_shapes):
    """`{name: make(seed) -> dataset of batches}`: train's input from the
    raw corpus, from `cached` (its blocks, cached), from prepared shards,
    the first pass with tf-text's op as it was, and the first pass's
    tokenizing alone, both ways (its blocks, neither shuffled nor batched):
    the ceiling of the first pass."""
    import tensorflow as tf

    from keras_transformer import data

    batching = dict(batch_tokens=config.batch_tokens, max_length=config.max_length,
                    shuffle_buffer=SHUFFLE_BUFFER, pad_id=config.pad_id, fixed_shapes=fixed_shapes)
    prepared = data.corpus(f"prepared:{prepared_dir}")
    before = TfTextTokenizer(tokenizer)
    return {
        "raw, tf-text's op (before)": lambda seed: data.block_token_batches(
            data.encode_blocks(corpus.pairs("train"), before).repeat(), seed=seed, **batching),
        "tokenizing alone, tf-text's op (before)": lambda seed: data.encode_blocks(
            corpus.pairs("train"), before).repeat(),
        "tokenizing alone": lambda seed: data.encode_blocks(
            corpus.pairs("train"), tokenizer).repeat(),
        "raw (first pass)": lambda seed: data.block_token_batches(
            data.encode_blocks(corpus.pairs("train"), tokenizer).repeat(), seed=seed, **batching),
        "cache (later passes)": lambda seed: data.autotuned(data.block_token_batches(
            cached.repeat(), seed=seed, **batching)),
        "prepared shards": lambda seed: prepared.training_input(
            config.batch_tokens, config.max_length, SHUFFLE_BUFFER, seed, pad_id=config.pad_id,
            fixed_shapes=fixed_shapes)(tf.distribute.InputContext()),
    }


def measure(batches, warmup, count, seconds=2.0):
    """`(real target tokens a second, real / padded target tokens, real
    target tokens a CPU second of this process's threads)` of at
    least `count` batches (or blocks of ragged ids) after `warmup`, and at
    least `seconds` of them (the pipelines prefetch: a fast one's first
    batches are ready before they are asked for)."""
    import tensorflow as tf

    iterator = iter(batches)
    for _ in range(warmup):
        next(iterator)
    start, cpu, real, padded, read = time.perf_counter(), time.process_time(), 0, 0, 0
    while read < count or time.perf_counter() - start < seconds:
        labels = next(iterator)[-1]
        labels = (labels.flat_values if isinstance(labels, tf.RaggedTensor) else labels).numpy()
        real += int(np.count_nonzero(labels))
        padded += labels.size
        read += 1
    return (real / (time.perf_counter() - start), real / padded,
            real / (time.process_time() - cpu))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--work", default=os.path.join(tempfile.gettempdir(), "input-bench"),
                        help="tokenizer, corpora and shards (made when missing)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--batches", type=int, default=20)
    args = parser.parse_args()

    from keras_transformer import data, run_folder
    from keras_transformer.models import BASE
    from keras_transformer.pipelines.prepare_data import prepare_data

    tokenizer_dir, _ = ding_work_folder(args.work)
    tokenizer = run_folder.load_tokenizer(tokenizer_dir)
    corpora = {"WMT-length": data.corpus(wmt_length_folder(args.work)),
               "Ding": data.corpus("ding")}
    rows = []
    for corpus_name, corpus in corpora.items():
        prepared_dir = os.path.join(args.work, f"prepared-base-{corpus_name}")
        if not os.path.exists(prepared_dir):
            print(f"Preparing {corpus_name} in {prepared_dir} ...", flush=True)
            prepare_data(corpus, tokenizer, prepared_dir, 4, BASE.max_length)
        cached = data.encode_blocks(corpus.pairs("train"), tokenizer).cache()
        for _ in cached:  # the first pass, which fills the cache
            pass
        for fixed_shapes in (False, True):
            contenders = pipelines(corpus, tokenizer, cached, prepared_dir, BASE, fixed_shapes)
            if fixed_shapes:  # unbatched: measured once
                for name in [name for name in contenders if name.startswith("tokenizing")]:
                    del contenders[name]
            figures = {name: [] for name in contenders}
            for turn in range(args.repeats):
                for name, make in contenders.items():
                    figures[name].append(measure(make(turn), args.warmup, args.batches))
                    print(f"  {corpus_name}, turn {turn + 1}, {name}: "
                          f"{figures[name][-1][0]:,.0f} target tokens/s, "
                          f"{figures[name][-1][2]:,.0f} a CPU second", flush=True)
            for name, values in figures.items():
                rate, real, per_cpu = (float(np.median(column)) for column in zip(*values))
                padding = ("none (ragged blocks)" if name.startswith("tokenizing") else
                           "fixed (XLA)" if fixed_shapes else "longest pair")
                rows.append((corpus_name, padding, name, rate, real, per_cpu))
                print(f"{rows[-1][:3]}: {rate:,.0f} target tokens/s, {real:.0%} real", flush=True)
    print(f"\n{machine()}; base preset batches ({BASE.batch_tokens:,} tokens a side), "
          f"{args.batches} batches a turn after {args.warmup}, median of {args.repeats} turns\n")
    print("| corpus | padding | input | real target tokens/s | per CPU second | real / padded |"
          "\n|---|---|---|---|---|---|")
    for corpus_name, padding, name, rate, real, per_cpu in rows:
        print(f"| {corpus_name} | {padding} | {name} | {rate:,.0f} | {per_cpu:,.0f} | {real:.0%} |")


if __name__ == "__main__":
    main()
