"""Our search against the same search at an earlier commit of this
repository: did a change make decoding slower where it should not?

    python benchmarks/search_against_commit.py c4d7b8d [--turns 3 --repeats 7]

Three settings, each beam 4 and greedy, float32, on models with random
weights and a vocabulary of 37,000 tokens whose end token never wins before
the limit (so both versions compute exactly the same number of steps):
- fixed length, `benchmarks/decode_throughput.py`'s: the base preset, 16
  sources of 24 tokens, 40 output tokens each;
- batch 1, `benchmarks/serving_latency.py`'s: the small preset, one source
  of 24 tokens, 40 output tokens;
- a `Translator` call of one sentence of 23 words (a SentencePiece word
  model of random words: 24 tokens), 40 output tokens, with the base
  model: what a server's lone request costs, text in and out; and the same
  sentence through the text SavedModel's `translate` function, beam 4 (as
  traced for the export, called in the process).

The commit is checked out into a temporary git worktree; each turn starts
one fresh process per version (this tree's benchmark code, the version's
library on PYTHONPATH), in turns, `--turns` times, so that both are timed
at the same time on a machine whose speed drifts. Each process reports the
median of `--repeats` calls of a traced search (or of the `Translator`)
after a warm-up call; the
table gives the median over the turns and old / new (above 1: faster now).
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402

from common import machine, word_tokenizer  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def measure(repeats, tokenizer_path):
    """Times the searches of the library on PYTHONPATH; prints one JSON line
    of milliseconds by setting. `tokenizer_path`: the word model (trained
    once by this tree's library, loaded by both versions)."""
    import tensorflow as tf

    import decode_throughput as fixed
    import keras_transformer
    from common import model_running_to_the_limit
    from keras_transformer.data import Tokenizer
    from keras_transformer.decoding import Translator, beam_search, greedy_search
    from keras_transformer.export.saved_model import ServingModule
    from keras_transformer.models import SMALL

    tree = os.environ["PYTHONPATH"]
    if not os.path.abspath(keras_transformer.__file__).startswith(os.path.abspath(tree)):
        raise RuntimeError(f"keras_transformer came from {keras_transformer.__file__}, not {tree}")
    margin = fixed.OUTPUT_TOKENS - (fixed.SOURCE_LENGTH - 1)
    source = tf.constant(fixed.sources())
    settings = (("base, 16 x 24", fixed.base_model(), source),
                ("small, batch 1", model_running_to_the_limit(
                    SMALL.replace(decode_margin=margin), fixed.VOCAB), source[:1]))

    def median_ms(call):
        calls = []
        for _ in range(repeats):
            start = time.perf_counter()
            call()
            calls.append(time.perf_counter() - start)
        return 1000 * float(np.median(calls))

    times = {}
    for name, model, ids in settings:
        for search_name, search, options in (("beam 4", beam_search, {"beam_size": 4}),
                                             ("greedy", greedy_search, {})):
            function = tf.function(lambda s, m=model, search=search, options=options:
                                   search(m, s, **options).tokens)
            lengths = np.count_nonzero(function(ids).numpy()[:, 0], axis=1)
            assert (lengths == fixed.OUTPUT_TOKENS).all(), lengths
            times[f"{name}, {search_name}"] = median_ms(lambda: function(ids).numpy())
    tokenizer = Tokenizer(tokenizer_path)
    # The first 23 words of the model (ids 4 to 26), as text.
    words = tokenizer.pieces(range(4, fixed.SOURCE_LENGTH + 3))
    sentence = [" ".join(piece.lstrip("\u2581") for piece in words)]
    for search_name, beam_size in (("beam 4", 4), ("greedy", 1)):
        translator = Translator(settings[0][1], tokenizer, beam_size=beam_size)
        # 39 words and the end token.
        assert len(translator.translate(sentence)[0].split()) == fixed.OUTPUT_TOKENS - 1
        times[f"Translator, 1, {search_name}"] = median_ms(lambda: translator.translate(sentence))
    translate = ServingModule(settings[0][1], tokenizer).translate
    inputs = (tf.constant(sentence), tf.constant(4), tf.constant(0.6), tf.constant(margin))
    words = translate(*inputs)["translations"].numpy()[0, 0].split()
    assert len(words) == fixed.OUTPUT_TOKENS - 1, len(words)
    times["SavedModel, 1, beam 4"] = median_ms(lambda: translate(*inputs)["translations"].numpy())
    print(json.dumps(times))


def in_process(tree, repeats, tokenizer_path):
    """One measuring process with `tree`'s library; its milliseconds."""
    process = subprocess.run(
        [sys.executable, os.path.abspath(__file__), "--measure", "--repeats", str(repeats),
         "--tokenizer", tokenizer_path],
        env=os.environ | {"PYTHONPATH": tree}, cwd=HERE, capture_output=True, text=True)
    if process.returncode:  # e.g. a commit whose library lacks what this measures
        last = process.stderr.strip().splitlines()[-1:] or ["no message"]
        raise SystemExit(f"Measuring {tree} failed: {last[0]}")
    return json.loads(process.stdout.strip().splitlines()[-1])


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("commit", nargs="?", help="the earlier commit (any git revision)")
    parser.add_argument("--turns", type=int, default=3)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--measure", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--tokenizer", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.measure:
        return measure(args.repeats, args.tokenizer)
    if not args.commit:
        parser.error("give the earlier commit to compare with")
    with tempfile.TemporaryDirectory() as scratch:
        old = os.path.join(scratch, "old")
        checkout = subprocess.run(["git", "-C", ROOT, "worktree", "add", "--detach", old,
                                   args.commit], capture_output=True, text=True)
        if checkout.returncode:
            parser.error(f"cannot check out {args.commit!r}: {checkout.stderr.strip()}")
        try:
            from decode_throughput import VOCAB

            word_tokenizer(VOCAB, scratch)
            tokenizer_path = os.path.join(scratch, "tokenizer.model")
            runs = {"old": [], "new": []}
            for _ in range(args.turns):
                runs["old"].append(in_process(old, args.repeats, tokenizer_path))
                runs["new"].append(in_process(ROOT, args.repeats, tokenizer_path))
        finally:
            subprocess.run(["git", "-C", ROOT, "worktree", "remove", "--force", old], check=True)
    isa = os.environ.get("ONEDNN_MAX_CPU_ISA", "not capped")
    print(f"Machine: {machine()}; oneDNN ISA: {isa}; {time.strftime('%Y-%m-%d %H:%M')}; "
          f"{args.commit} against this tree, {args.turns} turns\n"
          f"{'':26s} {'old ms':>8s} {'new ms':>8s} {'old / new':>10s}")
    for name in runs["new"][0]:
        old_ms, new_ms = (np.median([turn[name] for turn in runs[who]]) for who in ("old", "new"))
        print(f"{name:26s} {old_ms:8.1f} {new_ms:8.1f} {old_ms / new_ms:9.2f}x")


if __name__ == "__main__":
    main()
