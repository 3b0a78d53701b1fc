"""The language pair a model folder translates, where the folder tells:
what `keras-transformer serve` lists (`GET /languages`) and what an
export records in its export.json. Plain Python, read by the exporter and
the server alike (`runtimes` opens models; this module only reads what the
folder says)."""

import os
import re

from keras_transformer.textfiles import read_json

_LANGUAGE_PAIR = re.compile(r"(?:^|[-_/])([a-z]{2,3})(?:-|_to_)([a-z]{2,3})$")


def languages(path):
    """The model's `(source, target)` language codes, where the folder
    tells: an export's export.json, a run's run.json (its dataset's
    languages), an imported model's pretrained.json (`...opus-mt-de-en`,
    `...wmt19-en-de`) or FSMT's tokenizer config; else None."""
    path = os.fspath(path)
    if os.path.isfile(os.path.join(path, "export.json")):
        pair = read_json(os.path.join(path, "export.json")).get("languages")
        if pair:
            return tuple(pair)
    if os.path.isfile(os.path.join(path, "run.json")):
        options = read_json(os.path.join(path, "run.json")).get("options", {})
        dataset = str(options.get("dataset") or "")
        default = ("de", "en") if dataset == "ding" else _pair_in(dataset)
        if default or (options.get("source_language") and options.get("target_language")):
            default = default or (None, None)
            return (options.get("source_language") or default[0],
                    options.get("target_language") or default[1])
    if os.path.isfile(os.path.join(path, "pretrained.json")):
        pair = _pair_in(str(read_json(os.path.join(path, "pretrained.json")).get("source") or ""))
        if pair:
            return pair
    if os.path.isfile(os.path.join(path, "tokenizer_config.json")):
        pair = read_json(os.path.join(path, "tokenizer_config.json")).get("langs")
        if pair:
            return tuple(pair)
    return None


def _pair_in(name):
    """The language pair a dataset or model name ends with (`de-en`,
    `pt_to_en`), or None."""
    match = _LANGUAGE_PAIR.search(name.rstrip("/").lower())
    return (match.group(1), match.group(2)) if match else None
