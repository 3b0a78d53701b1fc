"""Translates with an exported `translate.tflite` (or searches with
`search_ids.tflite`) using only NumPy, a LiteRT interpreter and tf-text's
LiteRT kernels. This file imports nothing of keras_transformer, so that it
can be copied next to a model and run where this package is not installed:

    python translate_litert.py exports/ding/litert/translate.tflite "Guten Morgen!"
    python translate_litert.py exports/ding/litert/translate.tflite --n-best 2 < input.txt

With no sentences given it reads one per line from standard input and
writes one translation per line (with `--n-best`, the n best separated by
tabs). A file that takes token ids (a BPE model's: see
`keras_transformer.export.litert_model`) reads lines of space-separated
ids instead; `search_ids.tflite` writes the target ids of each line's best
hypothesis. `--json` (without a file) reads `{"runs": [{"model": PATH,
"sentences": [...]}, {"model": PATH, "source_ids": [[...], ...]}, ...]}`
from standard input and writes `{"results": [...], "loaded": [...]}`: for
each run the `translations` (for `search_ids.tflite`, the `target_ids`)
and `scores`, and which of TensorFlow and keras_transformer the process
had loaded (the export's checks use it).

The interpreter is ai-edge-litert's (`pip install ai-edge-litert`), else
TensorFlow's; tf-text's kernels (`tensorflow_text.tflite_registrar`) come
with tensorflow-text and need TensorFlow's framework library, which
`text_ops` loads without importing TensorFlow's Python package (see there).
"""

import argparse
import json
import sys

import numpy as np

SIGNATURE = "serving_default"
TRANSLATE_FILE, SEARCH_FILE = "translate.tflite", "search_ids.tflite"
"""The file names in an export's litert/ folder."""


def open_file(path, threads=None):
    """A LiteRT signature runner on a .tflite file, with tf-text's kernels
    registered."""
    try:
        from ai_edge_litert.interpreter import InterpreterWithCustomOps
    except ImportError:
        from tensorflow.lite.python.interpreter import InterpreterWithCustomOps
    interpreter = InterpreterWithCustomOps(
        model_path=path, custom_op_registerers=text_ops(),
        num_threads=threads)
    return interpreter.get_signature_runner(SIGNATURE)


def text_ops():
    """tf-text's LiteRT kernel registration functions (what
    `tensorflow_text.tflite_registrar.SELECT_TFTEXT_OPS` lists).

    `import tensorflow_text` imports all of TensorFlow's Python package:
    seconds of CPU at every start of this script, for kernels that need
    only TensorFlow's framework library. So where TensorFlow is not imported
    yet, that library and tf-text's registrar module are loaded from the
    installed packages' files (the module under its own name, which a later
    `import tensorflow_text` then reuses); where that fails (other file
    names than Linux's), or TensorFlow is imported anyway, the functions
    come from `tensorflow_text`."""
    if "tensorflow" not in sys.modules:
        try:
            module = sys.modules.get(_REGISTRAR) or _registrar_alone()
            return [getattr(module, name) for name in sorted(dir(module))
                    if name.startswith("Add")]
        except (ImportError, OSError):
            pass
    from tensorflow_text import tflite_registrar

    return tflite_registrar.SELECT_TFTEXT_OPS


_REGISTRAR = "tensorflow_text.core.pybinds.tflite_registrar"


def _registrar_alone():
    """tf-text's registrar module, loaded from its file after the
    `libtensorflow_framework.so.2` it links, without importing either
    package."""
    import ctypes
    import importlib.util
    import os

    packages = [importlib.util.find_spec(name) for name in ("tensorflow", "tensorflow_text")]
    if None in packages:
        raise ImportError("tensorflow or tensorflow-text is not installed")
    tensorflow, text = (os.path.dirname(spec.origin) for spec in packages)
    ctypes.CDLL(os.path.join(tensorflow, "libtensorflow_framework.so.2"))
    spec = importlib.util.spec_from_file_location(
        _REGISTRAR, os.path.join(text, "core", "pybinds", "tflite_registrar.so"))
    if spec is None:
        raise ImportError("no loader for tf-text's registrar file")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    sys.modules[_REGISTRAR] = module
    return module


def takes_text(runner):
    """Whether the file's input is text (else token ids)."""
    return "text" in runner.get_input_details()


def translate(runner, sentences):
    """`(translations, scores)` of a list of `str` (or, for a file that
    takes ids, of lists of source ids, each ending with the end id): a list
    of n-best lists of strings and a float32 array `(len(sentences), K)`,
    best first."""
    if len(sentences) == 0:
        return [], np.zeros((0, 1), np.float32)
    if takes_text(runner):
        outputs = runner(text=np.array([s.encode("utf-8") for s in sentences], dtype=object))
    else:
        outputs = runner(source_ids=padded(sentences))
    texts = [[text.decode("utf-8", errors="replace") for text in row]
             for row in outputs["translations"]]
    return texts, outputs["scores"]


def search(runner, source_ids):
    """`search_ids.tflite`: `(target_ids, scores)` of lists of source ids."""
    outputs = runner(source_ids=padded(source_ids))
    return outputs["target_ids"], outputs["scores"]


def padded(rows, pad_id=0):
    """Lists of ids -> int32 `(len(rows), longest)`, padded with `pad_id`
    (the models of this package pad with 0; an imported Marian model with
    its own pad id must be given padded arrays)."""
    if isinstance(rows, np.ndarray):
        return rows.astype(np.int32)
    array = np.full((len(rows), max(len(row) for row in rows)), pad_id, np.int32)
    for i, row in enumerate(rows):
        array[i, :len(row)] = row
    return array


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model", nargs="?", help="translate.tflite or search_ids.tflite")
    parser.add_argument("sentences", nargs="*", help="default: one per line from standard input")
    parser.add_argument("--n-best", type=int, default=1, help="at most the file's beam size")
    parser.add_argument("--threads", type=int, help="the interpreter's CPU threads")
    parser.add_argument("--json", action="store_true", help="JSON in and out (see above)")
    args = parser.parse_intermixed_args()
    if args.json:
        results = [_json_run(open_file(run["model"], args.threads), run)
                   for run in json.load(sys.stdin)["runs"]]
        loaded = sorted(name for name in ("tensorflow", "keras_transformer") if name in sys.modules)
        json.dump({"results": results, "loaded": loaded}, sys.stdout)
        return
    if args.model is None:
        parser.error("give a .tflite file (or --json)")
    try:
        runner = open_file(args.model, args.threads)
    except ValueError as error:  # a missing or damaged file
        parser.error(f"cannot open {args.model}: {error}")
    lines = args.sentences or [line.rstrip("\n") for line in sys.stdin]
    if not takes_text(runner):
        try:
            lines = [[int(i) for i in line.split()] for line in lines]
        except ValueError:
            parser.error(f"{args.model} takes token ids: give lines of space-separated integers")
    if "target_ids" in runner.get_output_details():
        ids, _ = search(runner, lines)
        for row in ids:
            print("\t".join(" ".join(str(i) for i in hypothesis if i) for hypothesis
                             in row[:args.n_best]))
        return
    translations, _ = translate(runner, lines)
    for row in translations:
        print("\t".join(row[:args.n_best]))


def _json_run(runner, run):
    if "target_ids" in runner.get_output_details():
        ids, scores = search(runner, run["source_ids"])
        return {"target_ids": ids.tolist(), "scores": scores.tolist()}
    translations, scores = translate(runner, run.get("sentences") or run["source_ids"])
    return {"translations": translations, "scores": scores.tolist()}


if __name__ == "__main__":
    main()
