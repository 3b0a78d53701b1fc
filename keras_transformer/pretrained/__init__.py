"""Pretrained models of this architecture from other toolkits, imported
exactly: Hugging Face Marian (the OPUS-MT models), Hugging Face FSMT
(fairseq's WMT19 models) and Marian's own release files.

- `from_preset(source)`: `(Transformer, tokenizer)` from `"hf://OWNER/NAME"`
  or a local folder.
- `save_run(model, tokenizer, output_dir)`: a run folder that the package's
  commands read like a training run's.
- `marian`, `fsmt`, `marian_release` (with `marian_npz`, which reads the
  release files into Hugging Face's layout): the formats; `weights`:
  reading safetensors without pickle and the shared layer layout;
  `marian_vocabulary`, `fsmt_vocabulary` (plain Python, for the
  TensorFlow-free ONNX runner), `marian_tokenizer` (TensorFlow ops) and
  `fsmt_tokenizer` (Python behind the same interface): the tokenizers.

Modules are imported on first use, so that the plain-Python vocabularies
load without TensorFlow.
"""

import importlib

_PRESET_NAMES = ("from_preset", "save_run")

__all__ = list(_PRESET_NAMES)


def __getattr__(name):
    if name in _PRESET_NAMES:
        return getattr(importlib.import_module("keras_transformer.pretrained.presets"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
