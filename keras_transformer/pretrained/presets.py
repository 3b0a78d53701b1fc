"""`from_preset`: a pretrained checkpoint (a Hugging Face Hub id or a local
folder) as our `Transformer` and its tokenizer; `save_run`: those as a run
folder that every command of the package reads like a training run's.

Sources, following keras-hub's convention:
    "hf://Helsinki-NLP/opus-mt-de-en"  downloaded with `huggingface_hub`
    "path/to/folder"                    read offline

Formats, told apart by their files:
    Hugging Face Marian   config.json with model_type "marian" (OPUS-MT)
    Hugging Face FSMT     config.json with model_type "fsmt" (fairseq WMT19)
    Marian's own release  decoder.yml, *.npz, *.vocab.yml, source/target.spm
"""

import json
import os

from keras_transformer import run_folder

HF_PREFIX = "hf://"
# What a download fetches: configs, vocabularies, tokenizer models and
# safetensors weights, never a pickle unless the user allows it.
_DOWNLOAD_PATTERNS = ["*.json", "*.spm", "*.txt", "*.safetensors"]


def resolve(source, allow_pytorch_pickle=False):
    """A local folder for `source`, downloading `hf://` ids first."""
    source = os.fspath(source)
    if not source.startswith(HF_PREFIX):
        if not os.path.isdir(source):
            raise ValueError(f"{source!r} is not a folder; give a local model folder or "
                             f"{HF_PREFIX}OWNER/NAME.")
        return source
    try:
        import huggingface_hub
    except ImportError:
        raise ValueError("Downloading from the Hugging Face Hub needs huggingface_hub: "
                         "pip install 'keras-transformer[pretrained]'.") from None
    patterns = _DOWNLOAD_PATTERNS + (["pytorch_model.bin"] if allow_pytorch_pickle else [])
    try:
        return huggingface_hub.snapshot_download(source[len(HF_PREFIX):], allow_patterns=patterns)
    except Exception as error:  # the hub client raises many types (offline, 404, auth)
        raise ValueError(f"Cannot download {source}: {error}") from None


def detect_format(directory):
    """"marian", "fsmt" or "marian_release", from the folder's files."""
    if os.path.isfile(os.path.join(directory, "decoder.yml")):
        return "marian_release"
    path = os.path.join(directory, "config.json")
    if not os.path.isfile(path):
        raise ValueError(f"{directory} holds neither config.json (a Hugging Face model) nor "
                         "decoder.yml (a Marian release).")
    try:
        with open(path, encoding="utf-8") as file:
            model_type = json.load(file).get("model_type")
    except (OSError, ValueError, AttributeError) as error:
        raise ValueError(f"Cannot read {path}: {error}.") from None
    if model_type not in ("marian", "fsmt"):
        raise ValueError(f"{path}: model_type {model_type!r} is not supported; this package "
                         "imports 'marian' (OPUS-MT) and 'fsmt' (fairseq WMT19) models.")
    return model_type


def from_preset(source, allow_pytorch_pickle=False):
    """Imports a pretrained model: `(Transformer, tokenizer)`.

    Args:
        source: `"hf://OWNER/NAME"` or a local folder (see the module
            docstring for the formats).
        allow_pytorch_pickle: read a folder that has only
            `pytorch_model.bin`, with PyTorch's `weights_only=True` loader.

    Raises:
        ValueError: with a one-line reason, for anything it cannot import.
    """
    directory = resolve(source, allow_pytorch_pickle)
    kind = detect_format(directory)
    # The formats are imported once the folder is known to hold one: a bad
    # source is refused before TensorFlow loads (and Marian's release files
    # need PyYAML, of the pretrained extra).
    if kind == "marian":
        from keras_transformer.pretrained import marian

        return marian.load(directory, allow_pytorch_pickle)
    if kind == "fsmt":
        from keras_transformer.pretrained import fsmt

        return fsmt.load(directory, allow_pytorch_pickle)
    from keras_transformer.pretrained import marian_release

    return marian_release.load(directory)


def save_run(model, tokenizer, output_dir, source=None, overwrite=False):
    """Writes an imported model as a run folder (`run_folder.save_run`) that
    every command reads like a training run's, with where it came from
    (`source`) and its vocabularies' sizes in pretrained.json."""
    return run_folder.save_run(model, tokenizer, output_dir, {
        "source": source, "source_vocab_size": model.source_vocab_size,
        "target_vocab_size": model.target_vocab_size}, overwrite=overwrite)
