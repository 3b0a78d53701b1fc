"""The demo's pictures: loss curves from a run's metrics, attention maps."""

import json

import keras
import matplotlib.image
import numpy as np
import pytest

from keras_transformer.data import Tokenizer, train_tokenizer
from keras_transformer.models import BASE, transformer
from keras_transformer.plots import plot_attention, plot_training_curves


def test_training_curves_from_metrics(tmp_path):
    metrics = tmp_path / "metrics.jsonl"
    metrics.write_text("".join(
        json.dumps({"step": s, "loss": 9 - s / 100, "val_loss": 8.5 - s / 120, "val_chrf": s / 20,
                    "val_bleu": s / 80}) + "\n" for s in (100, 200, 300)))
    path = plot_training_curves(str(metrics), str(tmp_path / "curves.png"))
    image = matplotlib.image.imread(path)
    assert image.shape[0] > 300 and image.shape[1] > 800
    assert image[..., :3].std() > 0.05  # not a blank canvas
    (tmp_path / "empty.jsonl").write_text("")
    with pytest.raises(ValueError, match="no logged epochs"):
        plot_training_curves(str(tmp_path / "empty.jsonl"), str(tmp_path / "x.png"))


def test_attention_maps_of_a_sentence(tmp_path):
    keras.utils.set_random_seed(0)  # before the tokenizer: it clears tf-text's resources
    texts = [f"Das Haus {i} ist groß. The house {i} is big." for i in range(200)]
    train_tokenizer(texts, tmp_path / "spm.model", vocab_size=80)
    tokenizer = Tokenizer(str(tmp_path / "spm.model"))
    model = transformer(BASE.replace(num_encoder_layers=2, num_decoder_layers=2, d_model=16,
                                     d_ff=32, num_heads=4), tokenizer.vocab_size)
    path = plot_attention(model, tokenizer, "Das Haus ist groß.", "The house is big.",
                          str(tmp_path / "attention.png"), layer=1, heads=[0, 3])
    image = matplotlib.image.imread(path)
    # Three rows (encoder self, decoder self, cross) by two heads: taller than wide.
    assert image.shape[0] > image.shape[1] and np.asarray(image)[..., :3].std() > 0.05
