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
  `marian_tokenizer` (TensorFlow ops) and `fsmt_tokenizer` (Python behind
  the same interface): the tokenizers, on the plain-Python vocabularies of
  `keras_transformer.vocabularies`.
"""

from keras_transformer.pretrained.presets import from_preset, save_run

__all__ = ["from_preset", "save_run"]
