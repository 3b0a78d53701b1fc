"""One sentence alone, as an interactive user sends it: the `Translator`
against CTranslate2 float32 on the same weights, and where the
`Translator`'s time goes.

    apt-get install trans-de-en                  # the Ding dictionary
    python benchmarks/widened_model.py runs/small runs/small-as-base
    python benchmarks/one_sentence.py runs/small runs/small-as-base [--threads 2 --repeats 12]

For each run (the small preset; its base-size widening, which translates
exactly as it does), short (3-5 words) and long (20 words or more) Ding
sentences, beam 4 and greedy: `Translator.translate([sentence])` and
CTranslate2's `translate_batch([tokens])` (sentencepiece in and out, the
same limits: the model's output margin, its positions), timed in turns,
sentence by sentence (`common.timed_interleaved`: every contender once,
then again), warm; the median of the calls. Both use `--threads` cores
(TensorFlow's intra-op threads, set before it starts; CTranslate2's
intra_threads). Beside them, in the same turns, a `Translator` whose lone
sentences take the search compiled by XLA (`Translator.compile_lone`, as
`serve` does; compiled before the timing), and how many of its
translations are the traced search's.

The split of the `Translator`'s call (`--split`), timed the same way: the
tokenizer (tf-text's SentencePiece op), the encoder alone, the search
capped at one output token (the encoder, the caches and a step: the fixed
cost of a call), each further step ((call - capped) / (steps - 1)), and the
Python around the traced search (translate - the traced call).

Goal (issue 67): the `Translator` at most 1.25x CTranslate2's latency in
every cell.
"""

import argparse
import os
import sys
import tempfile

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("runs", nargs="+", help="trained run folders (German to English)")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=3, help="turns over the sentences")
    parser.add_argument("--sentences", type=int, default=12, help="of each length")
    parser.add_argument("--split", action="store_true", help="also where the time goes")
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
    print(f"Machine: {machine()}, {args.threads} thread(s) each; TensorFlow's kernels: "
          f"{kernels}; CTranslate2's Intel MKL: {os.environ.get('CT2_USE_MKL', 'its default')}; "
          f"medians of {args.repeats} turn(s) over {args.sentences} sentences of each length.\n")
    print(f"{'run':24s} {'case':6s} {'beam':>4s} {'Translator ms':>14s} {'compiled ms':>12s} "
          f"{'CTranslate2 ms':>15s} {'ratio':>6s} {'compiled':>9s} {'same':>6s}")
    for run in args.runs:
        folder = os.path.join(tempfile.mkdtemp(prefix="one-sentence-"), "export")
        export_run(run, folder, formats=["ctranslate2"])
        processor = sentencepiece.SentencePieceProcessor(
            model_file=os.path.join(run, "tokenizer.model"))
        peer = ctranslate2.Translator(os.path.join(folder, "ctranslate2"),
                                      intra_threads=args.threads)
        for beam in (4, 1):
            translator = Translator.from_directory(run, beam_size=beam, in_flight=1)
            compiled = Translator.from_directory(run, beam_size=beam, in_flight=1)
            compiled.compile_lone(background=False)
            config = translator.model.config

            def ctranslate2_call(text, beam=beam, config=config):
                tokens = processor.encode(text, out_type=str)[:config.max_source_tokens]
                limit = min(len(tokens) + translator.decode_margin, config.max_length)
                found = peer.translate_batch([tokens], beam_size=beam, max_decoding_length=limit,
                                             min_decoding_length=0, length_penalty=translator.alpha)
                return processor.decode(found[0].hypotheses[0])

            for case, texts in cases.items():
                runs = {}
                for index, text in enumerate(texts):
                    runs[f"ours {index}"] = lambda text=text: translator.translate([text])
                    runs[f"compiled {index}"] = (lambda text=text, compiled=compiled:
                                                 compiled.translate([text]))
                    runs[f"theirs {index}"] = lambda text=text: ctranslate2_call(text)
                found = timed_interleaved(runs, 2, args.repeats)
                ours, fast, theirs = (
                    float(np.median([found[f"{name} {i}"] for i in range(len(texts))]))
                    for name in ("ours", "compiled", "theirs"))
                same = sum(translator.translate([text]) == compiled.translate([text])
                           for text in texts)
                print(f"{os.path.basename(os.path.normpath(run)):24s} {case:6s} {beam:4d} "
                      f"{ours * 1000:14.2f} {fast * 1000:12.2f} {theirs * 1000:15.2f} "
                      f"{ours / theirs:6.2f} {fast / theirs:9.2f} {same:3d}/{len(texts)}",
                      flush=True)
                if args.split:
                    split(translator, texts, args.repeats, tf, np, timed_interleaved,
                          beam_search, greedy_search)


def split(translator, texts, repeats, tf, np, timed_interleaved, beam_search, greedy_search):
    """Prints where a `Translator` call of each text goes (see the module
    docstring), medians over `texts`."""
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
        traced = (source, blank, tf.constant(0, tf.int64), tf.constant(translator.alpha),
                  weights)
        found = timed_interleaved({
            "tokenize": lambda: translator._tokenize([text]),
            "encoder": lambda: encoder(source),
            "one output token": lambda: capped(source),
            "traced": lambda: translator._translate(*traced),
            "translate": lambda: translator.translate([text])}, 2, repeats)
        steps = int(translator._translate(*traced)[2].numpy()[0])
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
