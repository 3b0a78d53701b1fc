"""The folders a model lives in: what they hold, how to tell them apart, and
how to read and write them. Every other module goes through here.

A run folder, written by `keras-transformer train` (or `import`, for a
pretrained model), read by every command:

    config.json       the `TransformerConfig` (the training recipe and the
                      decoding defaults included)
    run.json          a training run's options (`RunOptions`) and report
    pretrained.json   an imported model's origin (instead of run.json)
    tokenizer files   ours: tokenizer.model (and tokenizer.vocab); an
                      imported model's: Marian's vocab.json, source.spm,
                      target.spm; FSMT's vocab-src.json, vocab-tgt.json,
                      merges.txt (`TOKENIZER_KINDS`)
    checkpoints/      the last training checkpoints (TensorFlow checkpoints
                      on TensorFlow, safetensors files on JAX and PyTorch),
                      and saved.jsonl, the record of every save
    logs/             TensorBoard event files and metrics.jsonl
    model.keras       the final weights
    averaged.keras    the mean of the last checkpoints (the paper's
                      checkpoint averaging), or the final weights where
                      those validate better: the model to decode with

An export folder, written by `keras-transformer export`, read by the
runtimes (`runtimes`) and the server; each format's part is named after it
(`names.FORMATS`):

    export.json       what was exported, what its checks measured, the
                      model's config and its languages
    tokenizer files   the run's
    model.keras       the Keras model (format "keras")
    saved_model/      text in, text out, and the id signatures (TF Text ops)
    saved_model_core/ the id signatures only, core TF ops (stock TF Serving)
    onnx/             the encoder, decoder-step and forward graphs, their
                      config.json and the tokenizer files; translate.onnx
    ctranslate2/      a CTranslate2 model with the tokenizer files
    litert/           translate.tflite and search_ids.tflite

Plain Python at import: the server and the runtimes read a folder's kind,
config and languages without TensorFlow. `load_model` and `load_tokenizer`
import Keras and TensorFlow when called.
"""

import dataclasses
import hashlib
import importlib
import os
import re
import tempfile

from keras_transformer import names
from keras_transformer.textfiles import (
    check_output,
    read_json,
    replace_file,
    replace_folder,
    replace_path,
    write_json,
)
from keras_transformer.vocabularies import fsmt, marian, sentencepiece_text

CONFIG_FILE = "config.json"
RUN_FILE = "run.json"
PRETRAINED_FILE = "pretrained.json"
MODEL_FILE = "model.keras"
AVERAGED_FILE = "averaged.keras"
CHECKPOINTS = "checkpoints"
LOGS = "logs"
EXPORT_FILE = "export.json"
SAVED_MODEL_CORE = "saved_model_core"


@dataclasses.dataclass
class RunOptions:
    """Everything a training run needs besides the model's `TransformerConfig`
    (what run.json records as its "options").

    `None` means "from the config" for `steps`, `batch_tokens` and
    `keep_checkpoints` (its `train_steps`, `batch_tokens`,
    `average_checkpoints`). `init_from` is a run folder to fine-tune from
    (its config replaces `preset`, its tokenizer `vocab_size`).
    `sentence_repeats` reads every training pair whose source is a whole
    sentence that many times per pass (`data.repeat_full_sentences`; the
    demo: 2, as Ding's sentences are 5% of its pairs); 1 reads the corpus as
    it is, and prepared data (already tokenized) takes only 1.
    `sentences_last`: the fraction of the run's updates, at its end, that
    read only those pairs (`data.switched`; of the updates a time budget
    is expected to allow; the demo: 0.35 for Ding); prepared data takes
    only 0.
    `calibrate_sentences`: the whole sentences of the validation split the
    run's calibrator is fitted on at its end (`evaluation.calibrate_run`;
    0: none).
    """

    output_dir: str
    init_from: str | None = None
    dataset: str = "ding"
    source_language: str | None = None
    target_language: str | None = None
    data_dir: str | None = None
    ding_path: str = names.DING_PATH
    preset: str = "small"
    overrides: dict = dataclasses.field(default_factory=dict)
    vocab_size: int = 8000
    tokenizer_type: str = "bpe"
    tokenizer_sentences: int = 1_000_000
    strategy: str = "default"
    precision: str = "float32"
    xla: bool = False
    steps: int | None = None
    time_budget_minutes: float | None = None
    batch_tokens: int | None = None
    accumulation_steps: int = 1
    checkpoint_every_steps: int | None = 500
    checkpoint_every_minutes: float | None = None
    keep_checkpoints: int | None = None
    eval_every_steps: int = 500
    bleu_sentences: int = 200
    sentence_repeats: int = 1
    sentences_last: float = 0.0
    calibrate_sentences: int = 2000
    shuffle_buffer: int = 20_000
    seed: int = 1234
    verbose: int = 1


# -- the parts of a run folder ----------------------------------------------

def checkpoints_dir(run_dir):
    """The folder of a run's training checkpoints."""
    return os.path.join(run_dir, CHECKPOINTS)


def logs_dir(run_dir):
    """The folder of a run's TensorBoard logs and metrics.jsonl."""
    return os.path.join(run_dir, LOGS)


def model_path(run_dir, averaged=False, model_file=None):
    """The path of a run's model.keras, its averaged.keras (`averaged`), or
    another .keras file in it (`model_file`)."""
    return os.path.join(run_dir, model_file or (AVERAGED_FILE if averaged else MODEL_FILE))


def has_config(run_dir):
    """Whether the folder holds a model config (a run, or one being trained)."""
    return os.path.isfile(os.path.join(run_dir, CONFIG_FILE))


def folder_kind(path):
    """"export" (export.json) or "run" (config.json and a .keras model), with
    a one-line error for anything else."""
    path = os.fspath(path)
    if not os.path.isdir(path):
        raise ValueError(f"{path} is not a folder; give a training run, an imported model or an "
                         "export (keras-transformer export).")
    if os.path.isfile(os.path.join(path, EXPORT_FILE)):
        return "export"
    if has_config(path) and any(os.path.isfile(os.path.join(path, name))
                                for name in (AVERAGED_FILE, MODEL_FILE)):
        return "run"
    raise ValueError(f"{path} is neither a run folder ({CONFIG_FILE} and {AVERAGED_FILE} or "
                     f"{MODEL_FILE}) nor an export ({EXPORT_FILE}); give one of them.")


def export_part(export_dir, format_name):
    """The file or folder of an export that holds `format_name` (one of
    `names.FORMATS`, or saved_model_core)."""
    return os.path.join(export_dir, MODEL_FILE if format_name == "keras" else format_name)


# -- reading ------------------------------------------------------------------

def model_config(path):
    """The model's config, a dict of `TransformerConfig` fields, of a run
    (config.json) or an export (export.json)."""
    path = os.fspath(path)
    if folder_kind(path) == "export":
        return export_report(path)["config"]
    return read_json(os.path.join(path, CONFIG_FILE))


def load_config(run_dir, option="--init-from"):
    """A run's `TransformerConfig`; a one-line error naming `option` (the
    argument that gave the folder) where it has none."""
    # Keras is imported with the config (models), not at import: the
    # server reads folders without it.
    from keras_transformer.models import TransformerConfig

    path = os.path.join(run_dir, CONFIG_FILE)
    if not os.path.isfile(path):
        raise ValueError(f"{option} {run_dir!r}: no {CONFIG_FILE} there; give a training run "
                         "or a folder written by keras-transformer import.")
    return TransformerConfig.from_file(path)


def export_report(export_dir):
    """An export's export.json, as a dict."""
    return read_json(os.path.join(export_dir, EXPORT_FILE))


def run_options(run_dir):
    """The options a training run recorded in its run.json (a dict), or None
    where it has none (an imported model)."""
    path = os.path.join(run_dir, RUN_FILE)
    if not os.path.isfile(path):
        return None
    options = read_json(path).get("options")
    if not isinstance(options, dict):
        raise ValueError(f"{path} does not hold a run's options; the file is damaged.")
    return options


_LANGUAGE_PAIR = re.compile(r"(?:^|[-_/])([a-z]{2,3})(?:-|_to_)([a-z]{2,3})$")


def languages(path):
    """The model's `(source, target)` language codes, where the folder tells:
    an export's export.json, a run's run.json (its dataset's languages), an
    imported model's pretrained.json (`...opus-mt-de-en`, `...wmt19-en-de`)
    or FSMT's tokenizer config; else None."""
    path = os.fspath(path)
    if os.path.isfile(os.path.join(path, EXPORT_FILE)):
        pair = export_report(path).get("languages")
        if pair:
            return tuple(pair)
    if os.path.isfile(os.path.join(path, RUN_FILE)):
        options = read_json(os.path.join(path, RUN_FILE)).get("options", {})
        dataset = str(options.get("dataset") or "")
        default = ("de", "en") if dataset == "ding" else _pair_in(dataset)
        if default or (options.get("source_language") and options.get("target_language")):
            default = default or (None, None)
            return (options.get("source_language") or default[0],
                    options.get("target_language") or default[1])
    if os.path.isfile(os.path.join(path, PRETRAINED_FILE)):
        pair = _pair_in(str(read_json(os.path.join(path, PRETRAINED_FILE)).get("source") or ""))
        if pair:
            return pair
    if os.path.isfile(os.path.join(path, fsmt.CONFIG_FILE)):
        pair = read_json(os.path.join(path, fsmt.CONFIG_FILE)).get("langs")
        if pair:
            return tuple(pair)
    return None


def _pair_in(name):
    """The language pair a dataset or model name ends with (`de-en`,
    `pt_to_en`), or None."""
    match = _LANGUAGE_PAIR.search(name.rstrip("/").lower())
    return (match.group(1), match.group(2)) if match else None


# -- tokenizers ---------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class TokenizerKind:
    """A kind of tokenizer a folder may hold, known by a file only it writes.

    Attributes:
        name: what it is called.
        marker: the file that tells it.
        text_tokenizer: its plain-Python class (`vocabularies`), with
            `from_directory`.
        tokenizer: "module:Class" of its TensorFlow tokenizer, with
            `from_directory`, imported when a folder's is loaded (an
            imported format's lives in `pretrained`).
    """

    name: str
    marker: str
    text_tokenizer: type
    tokenizer: str


TOKENIZER_KINDS = (
    TokenizerKind("sentencepiece", sentencepiece_text.MODEL_FILE,
                  sentencepiece_text.SentencePieceText, "keras_transformer.data.tokenizer:Tokenizer"),
    TokenizerKind("marian", marian.VOCAB, marian.MarianVocabulary,
                  "keras_transformer.pretrained.marian_tokenizer:MarianTokenizer"),
    TokenizerKind("fsmt", fsmt.SOURCE_VOCAB_FILE, fsmt.FsmtVocabulary,
                  "keras_transformer.pretrained.fsmt_tokenizer:FsmtTokenizer"),
)
"""Every kind of tokenizer a folder may hold, in the order they are looked
for: ours, then the imported formats' (a new format adds its kind here)."""


def tokenizer_kind(directory):
    """The `TokenizerKind` of the tokenizer `directory` holds, or None."""
    return next((kind for kind in TOKENIZER_KINDS
                 if os.path.exists(os.path.join(directory, kind.marker))), None)


def has_tokenizer(directory):
    """Whether `directory` holds a tokenizer that `load_tokenizer` reads."""
    return tokenizer_kind(directory) is not None


def _kind_or_error(directory):
    kind = tokenizer_kind(os.fspath(directory))
    if kind is None:
        raise ValueError(
            f"No tokenizer in {os.fspath(directory)!r}: expected "
            f"{sentencepiece_text.MODEL_FILE} (trained by keras-transformer train), or an "
            "imported model's vocab.json, source.spm and target.spm (Marian) or vocab-src.json, "
            "vocab-tgt.json and merges.txt (FSMT).")
    return kind


def load_tokenizer(directory):
    """The tokenizer of a run or export folder, in TensorFlow ops: ours
    (`data.Tokenizer`) or an imported model's (`pretrained`).

    Raises:
        ValueError: the folder holds no tokenizer this package can read.
    """
    module, name = _kind_or_error(directory).tokenizer.split(":")
    # Imported here: TensorFlow loads with the tokenizer, not with this module.
    return getattr(importlib.import_module(module), name).from_directory(os.fspath(directory))


def load_text_tokenizer(directory):
    """The tokenizer of a run or export folder in plain Python, no TensorFlow
    (`vocabularies`): `encode(text)` and `decode(ids)`."""
    return _kind_or_error(directory).text_tokenizer.from_directory(os.fspath(directory))


def tokenizer_files(tokenizer):
    """The files `tokenizer.save` writes, name -> bytes: what a pipeline
    sends to its workers, and what `tokenizer_checksum` hashes."""
    with tempfile.TemporaryDirectory() as folder:
        tokenizer.save(folder)
        files = {}
        for name in sorted(os.listdir(folder)):
            with open(os.path.join(folder, name), "rb") as file:
                files[name] = file.read()
    return files


def tokenizer_checksum(files):
    """SHA-256 of a tokenizer's files (`tokenizer_files`), names included:
    equal checksums, equal token ids."""
    digest = hashlib.sha256()
    for name in sorted(files):
        digest.update(f"{name}\0{len(files[name])}\0".encode("utf-8"))
        digest.update(files[name])
    return digest.hexdigest()


def tokenizer_from_files(files):
    """The tokenizer that `tokenizer_files` gave the files of."""
    with tempfile.TemporaryDirectory() as folder:
        for name, content in files.items():
            with open(os.path.join(folder, name), "wb") as file:
                file.write(content)
        return load_tokenizer(folder)


# -- models -------------------------------------------------------------------

def load_model(run_dir, model_file=None, checkpoint=None):
    """The `Transformer` of a run folder (or an export's model.keras):
    `model_file` in it (default averaged.keras, else model.keras), or a
    TensorFlow training `checkpoint` of the model its config.json describes.

    Raises:
        FileNotFoundError, ValueError: with one line naming what is missing
            or unreadable.
    """
    run_dir = os.fspath(run_dir)
    if not os.path.isdir(run_dir):
        raise FileNotFoundError(f"{run_dir} is not a folder; give a training run's output folder "
                                "or one written by keras-transformer import.")
    if checkpoint is not None:
        return _load_checkpoint(run_dir, checkpoint)
    candidates = [model_file] if model_file else [AVERAGED_FILE, MODEL_FILE]
    path = next((p for p in (os.path.join(run_dir, name) for name in candidates)
                 if os.path.isfile(p)), None)
    if path is None:
        raise FileNotFoundError(f"No model in {run_dir!r}: looked for {candidates}.")
    return load_transformer(path)


def load_transformer(path):
    """A saved `Transformer` (a .keras file), with errors that name the file."""
    # Keras and TensorFlow are imported when a model is loaded, not with
    # this module: the server reads folders without them.
    import keras

    from keras_transformer.models import Transformer

    try:
        model = keras.models.load_model(path, safe_mode=True)
    except Exception as error:  # Keras raises many types for a corrupt file
        raise ValueError(f"Cannot load the model {path!r}: {error}") from None
    if not isinstance(model, Transformer):
        raise ValueError(f"{path!r} holds a {type(model).__name__}, not a keras_transformer "
                         "Transformer.")
    return model


def _load_checkpoint(run_dir, checkpoint):
    """The model config.json describes, with a TensorFlow checkpoint's weights."""
    import tensorflow as tf  # as in load_transformer

    from keras_transformer.models import transformer

    tokenizer = load_tokenizer(run_dir)
    config = load_config(run_dir, option="the run")
    model = transformer(config, tokenizer.vocab_size, tokenizer.target_vocab_size)
    try:
        tf.train.Checkpoint(model=model).restore(checkpoint).expect_partial() \
            .assert_existing_objects_matched()
    except (tf.errors.OpError, AssertionError, ValueError) as error:
        raise ValueError(f"Cannot read checkpoint {checkpoint!r}: {error}") from None
    return model


# -- writing ------------------------------------------------------------------

def write_config(run_dir, config):
    """Writes a run's config.json (replaced whole)."""
    with replace_file(os.path.join(run_dir, CONFIG_FILE)) as file:
        file.write(config.to_json())


def write_report(run_dir, summary):
    """Writes a training run's run.json: `summary` holds its "options"."""
    write_json(os.path.join(run_dir, RUN_FILE), summary)


def save_model(run_dir, model, averaged=False, model_file=None):
    """Saves `model` as the run's model.keras (or averaged.keras, or
    `model_file`), written to a temporary name and moved into place."""
    path = model_path(run_dir, averaged, model_file)
    with replace_path(path) as partial:
        model.save(partial)
    return path


def set_length_penalty(run_dir, alpha):
    """Makes `alpha` the run's length penalty: in config.json and in the
    configs that averaged.keras and model.keras carry, which every
    translator and export of the run reads (each file replaced whole)."""
    config = load_config(run_dir, option="the run").replace(length_penalty=alpha)
    for averaged in (True, False):
        if os.path.isfile(model_path(run_dir, averaged)):
            model = load_transformer(model_path(run_dir, averaged))
            model.config = model.config.replace(length_penalty=alpha)
            save_model(run_dir, model, averaged)
    write_config(run_dir, config)


def save_run(model, tokenizer, output_dir, origin, overwrite=False):
    """Writes a run folder for a model that was not trained here (an
    imported one): config.json, the tokenizer's files, averaged.keras and
    pretrained.json (`origin`, a dict), so that every command reads it like
    a training run's.

    Everything is written to a temporary folder beside `output_dir` and
    moved into place at the end: an interrupted import leaves nothing
    behind, and an existing folder is only replaced with `overwrite`.
    """
    output_dir = check_output(output_dir, overwrite, folder=True,
                              option="overwrite=True (--overwrite)")
    with replace_folder(output_dir, prefix=".import-") as scratch:
        write_config(scratch, model.config)
        tokenizer.save(scratch)
        model.save(model_path(scratch, averaged=True))
        write_json(os.path.join(scratch, PRETRAINED_FILE), origin)
    return output_dir


def write_export_report(export_dir, report):
    """Writes an export's export.json."""
    write_json(os.path.join(export_dir, EXPORT_FILE), report)
