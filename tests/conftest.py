"""Shared test setup: quiet TensorFlow, deterministic seeds, small configs."""

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras  # noqa: E402
import pytest  # noqa: E402

from keras_transformer.models import BASE  # noqa: E402


@pytest.fixture(autouse=True)
def _seed():
    keras.utils.set_random_seed(1234)


@pytest.fixture
def tiny_config():
    """Two layers each side, small widths: fast, yet every code path runs."""
    return BASE.replace(
        num_encoder_layers=2, num_decoder_layers=2, d_model=16, d_ff=32, num_heads=4, max_length=64
    )
