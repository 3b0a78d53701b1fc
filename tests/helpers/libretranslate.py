"""LibreTranslate itself, run offline on our weights, as the peer the
differential tests and `benchmarks/against_libretranslate.py` check our
server against.

LibreTranslate (Argos Translate on CTranslate2) reads its models as Argos
packages: a folder with `metadata.json`, a CTranslate2 model in `model/`,
ONE SentencePiece model for both sides (`sentencepiece.model`) and its
sentence splitter's model. `argos_packages` builds one from an export's
CTranslate2 folder and the run's tokenizer, so both servers translate with
the same weights.

Offline, three things would reach the network and are kept from it:
- Argos' sentence splitter, MiniSBD, downloads `<language>.onnx` at the
  first request unless the package holds one in `minisbd/`. `minisbd_model`
  writes a stand-in: a tiny ONNX graph (built here with `onnx.helper`, no
  training) that ends a sentence at ".", "!" or "?" before a space or the
  end, and a token before each space. It runs MiniSBD's real code path
  (its vocabulary, features and decoding) with rules in place of a network.
- LibreTranslate updates its package index at start when fewer than two
  packages are installed: a second package of another type ("sbd", which
  Argos never translates with) keeps the count at two.
- `--load-only` names only the languages of our package.

LibreTranslate runs from its own virtual environment (it pins Flask,
requests and others that our test environment need not share):
`LIBRETRANSLATE` (its `libretranslate` command) where set, else
`.venv-libretranslate/bin/libretranslate` in the checkout, which
`tools/run_tests.sh` installs (`pip install libretranslate==1.9.6`).
"""

import contextlib
import json
import os
import shutil
import sqlite3
import subprocess

from helpers.processes import ROOT, free_ports
from helpers.servers import wait_until_up

VERSION = "1.9.6"
"""The LibreTranslate release the checks were written against."""


def executable():
    """LibreTranslate's command, or None where it is not installed."""
    chosen = os.environ.get("LIBRETRANSLATE") or os.path.join(
        ROOT, ".venv-libretranslate", "bin", "libretranslate")
    return chosen if os.path.isfile(chosen) and os.access(chosen, os.X_OK) else None


# MiniSBD's classes a character may end: 0 nothing, 1 a token, 2 a sentence
# (3 and 4, multi-word tokens, are never predicted here).
_UNITS = ["<PAD>", "<UNK>", "<EMPTY>", "<ROOT>", " ", ".", "!", "?"]


def minisbd_model(path, language):
    """Writes the stand-in splitter model (see the module docstring) to
    `path`, as MiniSBD reads one: inputs `units` (character ids, int64,
    batch x length) and `features` (float, batch x length x 1), output
    class scores (batch x length x 5); its vocabulary and configuration in
    the model's metadata."""
    import onnx
    from onnx import TensorProto, helper

    terminal = [1.0 if unit in ".!?" else 0.0 for unit in _UNITS]
    boundary = [1.0 if unit in (" ", "<PAD>") else 0.0 for unit in _UNITS]
    constant = lambda name, values, kind=TensorProto.FLOAT, dims=None: helper.make_node(  # noqa: E731
        "Constant", [], [name], value=helper.make_tensor(name + "_value", kind,
                                                         dims or [len(values)], values))
    nodes = [
        constant("terminal_table", terminal), constant("boundary_table", boundary),
        constant("one", [1], TensorProto.INT64), constant("axis", [1], TensorProto.INT64),
        constant("end", [2**62], TensorProto.INT64), constant("pad_id", [0], TensorProto.INT64),
        constant("batch_axis", [0], TensorProto.INT64), constant("zero", [0.0]),
        # The next character's id, a pad after the last.
        helper.make_node("Slice", ["units", "one", "end", "axis"], ["following"]),
        helper.make_node("Shape", ["units"], ["shape"]),
        helper.make_node("Gather", ["shape", "batch_axis"], ["batch"]),
        helper.make_node("Concat", ["batch", "one"], ["pad_shape"], axis=0),
        helper.make_node("Expand", ["pad_id", "pad_shape"], ["pads"]),
        helper.make_node("Concat", ["following", "pads"], ["next"], axis=1),
        helper.make_node("Gather", ["terminal_table", "units"], ["is_terminal"]),
        helper.make_node("Gather", ["boundary_table", "next"], ["before_boundary"]),
        # A sentence ends where a terminal is followed by a boundary (class
        # 2); a token ends before any boundary (class 1).
        helper.make_node("Mul", ["is_terminal", "before_boundary"], ["sentence_end"]),
        helper.make_node("Add", ["sentence_end", "before_boundary"], ["classes"]),
        helper.make_node("Cast", ["classes"], ["class_ids"], to=TensorProto.INT64),
        constant("depth", [5], TensorProto.INT64, dims=[]),
        constant("off_on", [0.0, 1.0]),
        helper.make_node("OneHot", ["class_ids", "depth", "off_on"], ["scores"], axis=-1),
        # `features` is read so that MiniSBD's feeds match the graph's inputs.
        helper.make_node("ReduceSum", ["features"], ["unused"], keepdims=0),
        helper.make_node("Mul", ["unused", "zero"], ["nothing"]),
        helper.make_node("Add", ["scores", "nothing"], ["logits"]),
    ]
    graph = helper.make_graph(
        nodes, "standin_splitter",
        [helper.make_tensor_value_info("units", TensorProto.INT64, ["batch", "length"]),
         helper.make_tensor_value_info("features", TensorProto.FLOAT,
                                       ["batch", "length", 1])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch", "length", 5])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    vocabulary = {"lang": language, "idx": 0, "cutoff": 0, "lower": False,
                  "_unit2id": {unit: index for index, unit in enumerate(_UNITS)},
                  "_id2unit": _UNITS}
    config = {"feat_funcs": ["space_before"], "max_seqlen": 1000, "batch_size": 32}
    for key, value in (("lang_code", language), ("config", json.dumps(config)),
                       ("vocab", json.dumps(vocabulary)), ("lexicon", "null")):
        entry = model.metadata_props.add()
        entry.key, entry.value = key, value
    onnx.checker.check_model(model)
    onnx.save(model, str(path))
    return path


NAMES = {"de": "German", "en": "English", "fr": "French"}


def argos_packages(ctranslate2_folder, sentencepiece_model, source, target, folder):
    """Writes `folder` (a pathlib.Path) as an Argos packages folder holding
    one translation package, `source` -> `target`, of the CTranslate2 model
    in `ctranslate2_folder` and `sentencepiece_model`, and the placeholder
    that keeps LibreTranslate offline; returns `folder`."""
    package = folder / f"translate-{source}_{target}"
    shutil.copytree(ctranslate2_folder, package / "model")
    shutil.copy(sentencepiece_model, package / "sentencepiece.model")
    (package / "minisbd").mkdir()
    minisbd_model(package / "minisbd" / f"{source}.onnx", source)
    (package / "metadata.json").write_text(json.dumps({
        "package_version": "1.0", "argos_version": "1.0", "type": "translate",
        "from_code": source, "from_name": NAMES.get(source, source),
        "to_code": target, "to_name": NAMES.get(target, target)}))
    placeholder = folder / "placeholder"
    placeholder.mkdir()
    (placeholder / "metadata.json").write_text(json.dumps({
        "package_version": "1.0", "argos_version": "1.0", "type": "sbd",
        "from_code": "xx", "from_name": "none", "to_code": "xx", "to_name": "none"}))
    return folder


def start(packages, work, languages, *flags):
    """LibreTranslate on a free loopback port, serving `packages` (from
    `argos_packages`) with `--load-only languages` and `flags`, its
    databases and files under `work` (its working folder); returns
    `(process, url)` once it answers /health."""
    command = executable()
    if command is None:
        raise RuntimeError("LibreTranslate is not installed: pip install "
                           f"libretranslate=={VERSION} (see tests/helpers/libretranslate.py)")
    port, = free_ports(1)
    os.makedirs(work / "db", exist_ok=True)
    env = dict(os.environ, ARGOS_PACKAGES_DIR=str(packages), XDG_DATA_HOME=str(work / "data"),
               XDG_CACHE_HOME=str(work / "cache"), HOME=str(work), ARGOS_CHUNK_TYPE="MINISBD",
               TMPDIR=str(work))
    log = open(work / "libretranslate.log", "w")
    process = subprocess.Popen(
        [command, "--host", "127.0.0.1", "--port", str(port), "--load-only",
         ",".join(languages), *flags], cwd=work, env=env, stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}/"
    wait_until_up(url, process, lambda: (work / "libretranslate.log").read_text(), seconds=120)
    return process, url


def write_keys(work, keys):
    """LibreTranslate's key database (`db/api_keys.db` under its working
    folder `work`, the table its `ltmanage keys add` writes) holding `keys`,
    `{key: (requests a minute, characters a text or None)}`."""
    os.makedirs(work / "db", exist_ok=True)
    with contextlib.closing(sqlite3.connect(work / "db" / "api_keys.db")) as database:
        database.execute('CREATE TABLE IF NOT EXISTS api_keys ("api_key" TEXT NOT NULL, '
                         '"req_limit" INTEGER NOT NULL, "char_limit" INTEGER DEFAULT NULL, '
                         'PRIMARY KEY("api_key"))')
        database.executemany("INSERT INTO api_keys VALUES (?, ?, ?)",
                             [(key, limit, chars) for key, (limit, chars) in keys.items()])
        database.commit()
