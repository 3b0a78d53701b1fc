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
`n_best`, `alpha`, `decode_margin`), and which of TensorFlow,
keras_transformer, PyTorch and transformers the process had loaded (the
tests check that it needs none of them).

onnxruntime-extensions' op library is loaded when this module is imported,
without importing the `onnxruntime_extensions` package: its `__init__`
imports its tokenizer converters, which import transformers and PyTorch
where they are installed (most of this script's start). A
process that imports TensorFlow must import this module (or that package)
before it: the library loaded after TensorFlow crashes the process when the
session is created (both bundle copies of the same libraries).
"""

import argparse
import ctypes
import importlib.machinery
import importlib.util
import json
import sys

import numpy as np
import onnxruntime


def _load_extensions_library():
    """The path of onnxruntime-extensions' op library (what its
    `get_library_path()` gives: the package's compiled module), loaded into
    this process; None where the package is not installed."""
    package = importlib.util.find_spec("onnxruntime_extensions")
    if package is None:
        return None
    library = importlib.machinery.PathFinder.find_spec("_extensions_pydll",
                                                       package.submodule_search_locations)
    ctypes.CDLL(library.origin)
    return library.origin


EXTENSIONS_LIBRARY = _load_extensions_library()

SETTINGS = {"beam_size": np.int32, "n_best": np.int32, "alpha": np.float32,
            "decode_margin": np.int32}


def open_session(path, threads=None):
    """An onnxruntime session on `translate.onnx`, with the
    onnxruntime-extensions ops registered."""
    if EXTENSIONS_LIBRARY is None:
        raise ModuleNotFoundError("translate.onnx needs onnxruntime-extensions: "
                                  "pip install onnxruntime-extensions")
    options = onnxruntime.SessionOptions()
    # Errors only: at every load onnxruntime warned, one line each, that the
    # settings are graph inputs with initializers, which is how the file
    # gives them their defaults.
    options.log_severity_level = 3
    options.register_custom_ops_library(EXTENSIONS_LIBRARY)
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
    try:
        session = open_session(args.model, args.threads)
    except ModuleNotFoundError as error:
        parser.exit(2, f"{parser.prog}: error: {error}\n")
    if args.json:
        request = json.load(sys.stdin)
        results = []
        for settings in request["settings"]:
            translations, scores = translate(session, request["sentences"], **settings)
            results.append({"translations": translations, "scores": scores.tolist()})
        loaded = sorted(name for name in ("tensorflow", "keras_transformer", "torch", "transformers")
                        if name in sys.modules)
        json.dump({"results": results, "loaded": loaded}, sys.stdout)
        return
    sentences = args.sentences or [line.rstrip("\n") for line in sys.stdin]
    translations, _ = translate(session, sentences, beam_size=args.beam_size, n_best=args.n_best,
                                alpha=args.alpha, decode_margin=args.decode_margin)
    for row in translations:
        print("\t".join(row))


if __name__ == "__main__":
    main()
