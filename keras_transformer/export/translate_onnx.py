"""Translates with an exported `translate.onnx` using only numpy, onnxruntime
and onnxruntime-extensions. This file imports nothing of keras_transformer,
so that it can be copied next to a model and run where neither TensorFlow
nor this package is installed:

    python translate_onnx.py exports/ding/onnx/translate.onnx "Guten Morgen!"
    python translate_onnx.py exports/ding/onnx/translate.onnx --beam-size 4 --n-best 2 < input.txt

With no sentences given it reads one per line from standard input and
writes one translation per line (with `--n-best`, the n-best separated by
tabs). `--json` reads `{"sentences": [...], "settings": [{...}, ...]}` from
standard input instead and writes `{"results": [...], "loaded": [...]}`:
the translations and scores for each settings dict (keys `beam_size`,
`n_best`, `alpha`, `decode_margin`), and which of TensorFlow and
keras_transformer the process had loaded (the export's checks use it).

A process that has imported TensorFlow must import onnxruntime_extensions
before it: the other way round, creating the session crashes (both bundle
copies of the same libraries).
"""

import onnxruntime_extensions  # isort: skip  (before anything that may load TensorFlow)

import argparse
import json
import sys

import numpy as np
import onnxruntime

SETTINGS = {"beam_size": np.int32, "n_best": np.int32, "alpha": np.float32,
            "decode_margin": np.int32}


def open_session(path, threads=None):
    """An onnxruntime session on `translate.onnx`, with the
    onnxruntime-extensions ops registered."""
    options = onnxruntime.SessionOptions()
    options.register_custom_ops_library(onnxruntime_extensions.get_library_path())
    if threads:
        options.intra_op_num_threads = threads
    return onnxruntime.InferenceSession(path, options)


def translate(session, sentences, **settings):
    """`(translations, scores)` for a list of `str`: a list of n-best lists
    of strings and a float32 array `(len(sentences), n_best)`. `settings`:
    `beam_size`, `n_best`, `alpha`, `decode_margin` (default: the model's,
    and one translation per sentence)."""
    unknown = set(settings) - set(SETTINGS)
    if unknown:
        raise ValueError(f"Unknown settings {sorted(unknown)}; choose from {sorted(SETTINGS)}.")
    if not sentences:
        return [], np.zeros((0, settings.get("n_best", 1)), np.float32)
    feeds = {"text": np.array(sentences, dtype=object)}
    feeds.update({name: np.array(value, SETTINGS[name]) for name, value in settings.items()
                  if value is not None})
    translations, scores = session.run(None, feeds)
    return translations.tolist(), scores


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model", help="translate.onnx")
    parser.add_argument("sentences", nargs="*", help="default: one per line from standard input")
    parser.add_argument("--beam-size", type=int)
    parser.add_argument("--n-best", type=int)
    parser.add_argument("--alpha", type=float)
    parser.add_argument("--decode-margin", type=int)
    parser.add_argument("--threads", type=int, help="onnxruntime's intra-op threads")
    parser.add_argument("--json", action="store_true", help="JSON in and out (see above)")
    args = parser.parse_intermixed_args()
    session = open_session(args.model, args.threads)
    if args.json:
        request = json.load(sys.stdin)
        results = []
        for settings in request["settings"]:
            translations, scores = translate(session, request["sentences"], **settings)
            results.append({"translations": translations, "scores": scores.tolist()})
        loaded = sorted(name for name in ("tensorflow", "keras_transformer") if name in sys.modules)
        json.dump({"results": results, "loaded": loaded}, sys.stdout)
        return
    sentences = args.sentences or [line.rstrip("\n") for line in sys.stdin]
    translations, _ = translate(session, sentences, beam_size=args.beam_size, n_best=args.n_best,
                                alpha=args.alpha, decode_margin=args.decode_margin)
    for row in translations:
        print("\t".join(row))


if __name__ == "__main__":
    main()
