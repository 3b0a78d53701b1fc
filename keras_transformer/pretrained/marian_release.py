"""Marian's own release files (an OPUS-MT-train `*.npz` with `decoder.yml`,
the `*.vocab.yml` vocabulary and the SentencePiece models) as our
`Transformer`.

`marian_npz` translates the release into Hugging Face's Marian layout, and
`marian.build` maps that onto the model, as for a Hugging Face folder, with
the two conventions in which Hugging Face's port differs from Marian itself:
Marian's sinusoids spread their frequencies over d_model / 2 - 1 steps
(`sinusoid="tensor2tensor"`, where the port uses d_model / 2), and its layer
normalisation adds epsilon 1e-6 (the port uses PyTorch's 1e-5). So a release
imports as Marian computes it, not as its Hugging Face conversion does.
"""

import os
import shutil
import tempfile

from keras_transformer.pretrained import marian, marian_npz
from keras_transformer.pretrained.marian_tokenizer import MarianTokenizer


def load(directory):
    """Imports a Marian release folder: `(Transformer, MarianTokenizer)`.

    Raises:
        ValueError: files missing or unreadable, or a model this package
            cannot represent (see `marian_npz.read_marian_release`).
    """
    release = marian_npz.read_marian_release(directory)
    # The tokenizer reads Hugging Face's files; write them from the release's
    # vocabulary into a scratch folder (it keeps their bytes in memory).
    scratch = tempfile.mkdtemp(prefix="marian-release-")
    try:
        marian_npz.write_hf_tokenizer_files(release, scratch)
        tokenizer = MarianTokenizer.from_directory(scratch)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    model = marian.build(release.config, release.weights, tokenizer,
                         os.path.join(directory, release.model_file), sinusoid="tensor2tensor",
                         layer_norm_epsilon=marian_npz.MARIAN_LAYER_NORM_EPSILON)
    return model, tokenizer
