"""int8 weights on onnxruntime against CTranslate2 int8, the same run's
weights exported both ways (`export --quantization int8`), in one run.

    apt-get install trans-de-en                  # the Ding dictionary
    python benchmarks/int8_search.py runs/small [--sentences 500 --repeats 2]

Held-out sentences of the run's corpus (its test split, whole sentences,
with their references), beam 4 and greedy:
- a file: every sentence, sorted by length and cut into batches of 32, by
  the export's step graphs (`OnnxTranslator`: `onnx_step.StepSearch.
  search_batch`), in float32 and in int8, and by CTranslate2 int8
  (`translate_batch`, `max_batch_size=32`), each at one and at two threads
  (each one's best is compared); target tokens a second (the SentencePiece
  pieces of the translations), chrF against the references, and the share
  of int8 translations equal to float32's;
- one sentence alone: 12 short Ding sentences, each searched alone over
  the step graphs (`onnx_step.StepSearch.search`) in float32 and int8 and by
  CTranslate2 int8 at one and two threads, in turns a quarter of a second
  apart; the median.

Goal (issue 80): int8 at least CTranslate2 int8's target tokens a second
(at its best thread count), beam 4 and greedy, with chrF within 0.5 of
float32's.
"""

import argparse
import functools
import os
import statistics
import tempfile
import time
import types

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402

from common import machine, timed_interleaved  # noqa: E402


def batches(items, size=32):
    """`items` (index, source) sorted by source length, in runs of `size`."""
    ordered = sorted(items, key=lambda item: len(item[1]))
    return [ordered[i:i + size] for i in range(0, len(ordered), size)]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run", help="a trained run folder (German to English, on Ding)")
    parser.add_argument("--sentences", type=int, default=500)
    parser.add_argument("--repeats", type=int, default=2)
    args = parser.parse_args()

    import ctranslate2
    import sacrebleu
    import sentencepiece

    from keras_transformer import onnx_step
    from keras_transformer.export import export_run
    from keras_transformer.runtimes.onnx_runner import OnnxTranslator
    from translate_file import ding_sentences
    from trust import held_out

    pairs = held_out(args.run, "test", args.sentences)
    sources, references = [source for source, _ in pairs], [target for _, target in pairs]
    work = tempfile.mkdtemp(prefix="int8-search-")
    folders = {}
    for precision in ("float32", "int8"):
        folders[precision] = os.path.join(work, precision)
        export_run(args.run, folders[precision], formats=["onnx", "ctranslate2"],
                   quantization=precision)
    processor = sentencepiece.SentencePieceProcessor(
        model_file=os.path.join(args.run, "tokenizer.model"))
    ours = {(precision, threads): OnnxTranslator(os.path.join(folder, "onnx"), threads=threads)
            for precision, folder in folders.items() for threads in (1, 2)}
    config = types.SimpleNamespace(**ours["float32", 1].search.config)
    peers = {threads: ctranslate2.Translator(os.path.join(folders["int8"], "ctranslate2"),
                                             intra_threads=threads, compute_type="int8")
             for threads in (1, 2)}
    margin, alpha = config.decode_margin, config.length_penalty
    print(f"Machine: {machine()}. {args.run}: {len(sources)} held-out sentences; "
          f"CTranslate2 {ctranslate2.__version__} int8; medians of {args.repeats} turn(s).\n")

    def ours_file(precision, threads, beam):
        found = [None] * len(sources)
        for batch in batches(list(enumerate(sources))):
            for (index, _), text in zip(batch, ours[precision, threads].translate(
                    [source for _, source in batch], beam_size=beam)):
                found[index] = text
        return found

    def peer_tokens(text):
        return processor.encode(text, out_type=str)[:config.max_length - 1]

    def peer_file(threads, beam):
        found = [None] * len(sources)
        for batch in batches(list(enumerate(sources))):
            tokens = [peer_tokens(source) for _, source in batch]
            results = peers[threads].translate_batch(
                tokens, beam_size=beam, max_batch_size=32, length_penalty=alpha,
                max_decoding_length=min(max(map(len, tokens)) + margin, config.max_length))
            for (index, _), result in zip(batch, results):
                found[index] = processor.decode(result.hypotheses[0])
        return found

    for beam in (4, 1):
        runs = {f"{name} {threads}": (lambda beam=beam, run=run, threads=threads:
                                      run(threads, beam))
                for name, run in (("ours float32", functools.partial(ours_file, "float32")),
                                  ("ours int8", functools.partial(ours_file, "int8")),
                                  ("CT2 int8", peer_file))
                for threads in (1, 2)}
        outputs = {name: run() for name, run in runs.items()}
        seconds = timed_interleaved(runs, 0, args.repeats)
        print(f"A file, beam {beam}:")
        rates = {}
        for name, found in outputs.items():
            rates[name] = sum(len(processor.encode(text)) for text in found) / seconds[name]
            chrf = sacrebleu.corpus_chrf(found, [references]).score
            print(f"  {name:14s} {rates[name]:8.0f} target tokens/s  chrF {chrf:5.2f}")
        same = np.mean([a == b for a, b in zip(outputs["ours int8 1"], outputs["ours float32 1"])])
        best = {name: max(rates[f"{name} 1"], rates[f"{name} 2"])
                for name in ("ours float32", "ours int8", "CT2 int8")}
        print(f"  ours int8: {best['ours int8'] / best['CT2 int8']:.2f}x CTranslate2 int8's "
              f"target tokens a second, each at its best thread count (float32: "
              f"{best['ours float32'] / best['CT2 int8']:.2f}x); {same:.1%} the same as "
              "float32\n")

    short = [text for text in ding_sentences(4000) if 3 <= len(text.split()) <= 5][:12]
    lone = {precision: onnx_step.StepSearch(
        [os.path.join(folder, "onnx", name) for name in onnx_step.FILES], config)
        for precision, folder in folders.items()}
    for beam in (4, 1):
        runs = {}
        for index, text in enumerate(short):
            ids = [int(i) for i in processor.encode(text)][:config.max_length - 1] + [config.eos_id]
            for precision in lone:
                runs[f"{precision} {index}"] = (lambda ids=ids, precision=precision, beam=beam:
                                               lone[precision].search(ids, beam, alpha, margin))
            for threads in (1, 2):
                runs[f"CT2 {threads} {index}"] = (
                    lambda text=text, threads=threads, beam=beam: peers[threads].translate_batch(
                        [peer_tokens(text)], beam_size=beam, length_penalty=alpha,
                        max_decoding_length=min(len(peer_tokens(text)) + margin,
                                                config.max_length)))
        found = timed_interleaved(runs, 1, args.repeats, pause=0.25)
        median = {name: statistics.median(found[f"{name} {i}"] for i in range(len(short)))
                  for name in ("float32", "int8", "CT2 1", "CT2 2")}
        print(f"One short sentence alone, beam {beam}: float32 {median['float32'] * 1000:.1f} ms,"
              f" int8 {median['int8'] * 1000:.1f} ms, CTranslate2 int8 "
              f"{median['CT2 1'] * 1000:.1f} ms (1 thread) / {median['CT2 2'] * 1000:.1f} ms (2): "
              f"int8 {median['int8'] / min(median['CT2 1'], median['CT2 2']):.2f}x its best")


if __name__ == "__main__":
    main()
