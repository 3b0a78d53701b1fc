"""One sentence alone, as an interactive user sends it: the `Translator`'s
search on onnxruntime against CTranslate2 float32 on the same weights, at
CTranslate2's best thread count, and where the traced search's time goes.

    apt-get install trans-de-en                  # the Ding dictionary
    python benchmarks/widened_model.py runs/small runs/small-as-base
    python benchmarks/one_sentence.py runs/small runs/small-as-base [--threads 2 --repeats 12]
    python benchmarks/one_sentence.py runs/small --baseline CHECKOUT   # and an earlier version's

For each run (the small preset; its base-size widening, which translates
exactly as it does), short (3-5 words) and long (20 words or more) Ding
sentences, beam 4 and greedy, timed in turns, sentence by sentence
(`common.timed_interleaved`: every contender once, then again, a quarter
of a second apart, so that CTranslate2's spinning OpenMP threads do not
slow the next contender), warm; the median of the calls:
- `Translator.translate([sentence])` with its lone sentences searched on
  onnxruntime (`Translator.search_lone_on_onnxruntime`, as `serve` does),
  with `--threads` threads;
- the same Translator's traced search (a batch's, which a lone sentence
  took before);
- CTranslate2's `translate_batch([tokens])` (sentencepiece in and out, the
  same limits: the model's output margin, its positions) with one thread
  and with two (on a virtual machine its OpenMP threads can lose more than
  they gain: its best of the two is the goal);
- with `--baseline CHECKOUT`, the `Translator` of that checkout (an
  earlier version of the package) with its lone sentence's search as it
  had it (`compile_lone`, XLA's, where it has that), in a process of its
  own that times each call itself (no pipe in the time).
Then how many of the onnxruntime search's translations are the traced
search's.

The split of the traced search's call (`--split`), timed the same way: the
tokenizer (tf-text's SentencePiece op), the encoder alone, the search
capped at one output token (the encoder, the caches and a step: the fixed
cost of a call), each further step ((call - capped) / (steps - 1)), and the
Python around the traced search (translate - the traced call).

Goal (issue 80): the onnxruntime search at most CTranslate2's best latency
in every cell, and at most 0.7x XLA's compiled search (the baseline's).
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

BASELINE = """
import json, sys, time
from keras_transformer.decoding import Translator
translators = {}
for line in sys.stdin:
    beam, text = json.loads(line)
    if beam not in translators:
        translators[beam] = Translator.from_directory(sys.argv[1], beam_size=beam, in_flight=1)
        if hasattr(translators[beam], "compile_lone"):
            translators[beam].compile_lone(background=False)
    start = time.perf_counter()
    found = translators[beam].translate([text])
    print(json.dumps([found, time.perf_counter() - start]), flush=True)
"""


class Baseline:
    """Another checkout's Translator in a process of its own, which times
    each lone call itself."""

    def __init__(self, checkout, run, threads):
        env = dict(os.environ, PYTHONPATH=os.path.abspath(checkout),
                   TF_NUM_INTRAOP_THREADS=str(threads))
        # (In the checkout: `python -c` puts the working folder first on
        # the path, which would import this checkout's package instead.)
        self.process = subprocess.Popen([sys.executable, "-c", BASELINE, os.path.abspath(run)],
                                        stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                        stderr=subprocess.DEVNULL, text=True, env=env,
                                        cwd=checkout)
        self.seconds = []

    def __call__(self, beam, text):
        self.process.stdin.write(json.dumps([beam, text]) + "\n")
        self.process.stdin.flush()
        answer = self.process.stdout.readline()
        if not answer:
            raise RuntimeError("the baseline's process ended; run it alone to see why")
        found, seconds = json.loads(answer)
        self.seconds.append(seconds)
        return found

    def close(self):
        self.process.stdin.close()
        self.process.wait()


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("runs", nargs="+", help="trained run folders (German to English)")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=3, help="turns over the sentences")
    parser.add_argument("--sentences", type=int, default=12, help="of each length")
    parser.add_argument("--split", action="store_true", help="also where the time goes")
    parser.add_argument("--baseline", metavar="CHECKOUT",
                        help="also time this checkout's Translator (an earlier version)")
    args = parser.parse_args()
    os.environ["TF_NUM_INTRAOP_THREADS"] = str(args.threads)
    # Our kernels as the commands choose them (Eigen's for float32, unless
    # TF_ENABLE_ONEDNN_OPTS says otherwise), before TensorFlow is imported.
    from keras_transformer.batch_defaults import decoding_kernels

    kernels = "Eigen" if decoding_kernels() else "oneDNN"

    import ctranslate2
    import numpy as np
    import sentencepiece
    import tensorflow as tf

    from common import machine, timed_interleaved
    from keras_transformer.decoding import Translator
    from keras_transformer.decoding.search import beam_search, greedy_search
    from keras_transformer.export import export_run
    from translate_file import ding_sentences

    pool = ding_sentences(4000)
    cases = {"short": [text for text in pool if 3 <= len(text.split()) <= 5][:args.sentences],
             "long": [text for text in pool if len(text.split()) >= 20][:args.sentences]}
    print(f"Machine: {machine()}, {args.threads} thread(s) for ours; TensorFlow's kernels: "
          f"{kernels}; CTranslate2's Intel MKL: {os.environ.get('CT2_USE_MKL', 'its default')}; "
          f"medians of {args.repeats} turn(s) over {args.sentences} sentences of each length.\n")
    print(f"{'run':20s} {'case':5s} {'beam':>4s} {'onnxruntime':>11s} {'traced':>8s} "
          f"{'CT2 1 thr':>9s} {'CT2 2 thr':>9s} {'baseline':>8s} {'/CT2 best':>9s} "
          f"{'/baseline':>9s} {'same':>6s}   (ms)")
    for run in args.runs:
        folder = os.path.join(tempfile.mkdtemp(prefix="one-sentence-"), "export")
        export_run(run, folder, formats=["ctranslate2"])
        processor = sentencepiece.SentencePieceProcessor(
            model_file=os.path.join(run, "tokenizer.model"))
        peers = {threads: ctranslate2.Translator(os.path.join(folder, "ctranslate2"),
                                                 intra_threads=threads) for threads in (1, 2)}
        baseline = args.baseline and Baseline(args.baseline, run, args.threads)
        for beam in (4, 1):
            traced = Translator.from_directory(run, beam_size=beam, in_flight=1)
            lone = Translator.from_directory(run, beam_size=beam, in_flight=1)
            lone.search_lone_on_onnxruntime(args.threads)
            config = traced.model.config

            def ctranslate2_call(text, threads, beam=beam, config=config):
                tokens = processor.encode(text, out_type=str)[:config.max_source_tokens]
                limit = min(len(tokens) + traced.decode_margin, config.max_length)
                found = peers[threads].translate_batch(
                    [tokens], beam_size=beam, max_decoding_length=limit, min_decoding_length=0,
                    length_penalty=traced.alpha)
                return processor.decode(found[0].hypotheses[0])

            for case, texts in cases.items():
                runs = {}
                for index, text in enumerate(texts):
                    runs[f"onnxruntime {index}"] = lambda text=text: lone.translate([text])
                    runs[f"traced {index}"] = lambda text=text: traced.translate([text])
                    for threads in (1, 2):
                        runs[f"CT2 {threads} {index}"] = (
                            lambda text=text, threads=threads: ctranslate2_call(text, threads))
                    if baseline:
                        runs[f"baseline {index}"] = (lambda text=text, beam=beam:
                                                     baseline(beam, text))
                if baseline:
                    baseline.seconds.clear()
                found = timed_interleaved(runs, 2, args.repeats, pause=0.25)
                if baseline:  # its own times, without the pipe (the last repeats' calls)
                    own = np.array(baseline.seconds[-args.repeats * len(texts):]).reshape(
                        args.repeats, len(texts))
                    for index in range(len(texts)):
                        found[f"baseline {index}"] = float(np.median(own[:, index]))
                median = {name: float(np.median([found[f"{name} {i}"] for i in range(len(texts))]))
                          for name in ("onnxruntime", "traced", "CT2 1", "CT2 2")
                          + (("baseline",) if baseline else ())}
                best = min(median["CT2 1"], median["CT2 2"])
                same = sum(traced.translate([text]) == lone.translate([text]) for text in texts)
                older = median.get("baseline")
                print(f"{os.path.basename(os.path.normpath(run)):20s} {case:5s} {beam:4d} "
                      f"{median['onnxruntime'] * 1000:11.2f} {median['traced'] * 1000:8.2f} "
                      f"{median['CT2 1'] * 1000:9.2f} {median['CT2 2'] * 1000:9.2f} "
                      + (f"{older * 1000:8.2f} " if older else f"{'-':>8s} ")
                      + f"{median['onnxruntime'] / best:9.2f} "
                      + (f"{median['onnxruntime'] / older:9.2f} " if older else f"{'-':>9s} ")
                      + f"{same:3d}/{len(texts)}", flush=True)
                if args.split:
                    split(traced, texts, args.repeats, tf, np, timed_interleaved,
                          beam_search, greedy_search)
        if baseline:
            baseline.close()


def split(translator, texts, repeats, tf, np, timed_interleaved, beam_search, greedy_search):
    """Prints where a traced `Translator` call of each text goes (see the
    module docstring), medians over `texts`."""
    from keras_transformer.decoding.translator import NO_BAN

    model, tokenizer = translator.model, translator.tokenizer
    weights = translator._output_weights
    encoder = tf.function(lambda ids: model.encode(ids, training=False))
    def search_capped(ids):  # the search as the Translator's, one output token at most
        if translator.beam_size == 1:
            return greedy_search(model, ids, max_output_length=1, output_weights=weights).tokens
        return beam_search(model, ids, translator.beam_size, translator.alpha,
                           max_output_length=1, best_only=True, output_weights=weights).tokens

    capped = tf.function(search_capped, autograph=False)
    parts = {name: [] for name in ("tokenize", "encoder", "first step", "each step", "python")}
    for text in texts:
        ids = translator._tokenize([text])
        source = np.concatenate([ids.flat_values.numpy()[:model.config.max_source_tokens],
                                 [tokenizer.eos_id]])[None].astype(np.int32)
        blank = np.array([False])
        inputs = (source, blank, tf.constant(0, tf.int64), tf.constant(translator.alpha),
                  weights, NO_BAN)
        found = timed_interleaved({
            "tokenize": lambda: translator._tokenize([text]),
            "encoder": lambda: encoder(source),
            "one output token": lambda: capped(source),
            "traced": lambda: translator._translate(*inputs),
            "translate": lambda: translator.translate([text])}, 2, repeats)
        steps = int(translator._translate(*inputs)[2].numpy()[0])
        parts["tokenize"].append(found["tokenize"])
        parts["encoder"].append(found["encoder"])
        parts["first step"].append(found["one output token"] - found["encoder"])
        parts["each step"].append((found["traced"] - found["one output token"])
                                  / max(steps - 1, 1))
        parts["python"].append(found["translate"] - found["traced"] - found["tokenize"])
    print("    split: " + ", ".join(f"{name} {np.median(values) * 1000:.2f} ms"
                                   for name, values in parts.items()), flush=True)


if __name__ == "__main__":
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    main()
