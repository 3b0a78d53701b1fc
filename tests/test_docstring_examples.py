"""The examples in the public docstrings run and print what they claim."""

import doctest
import importlib

import pytest

MODULES = [
    "keras_transformer.layers.attention",
    "keras_transformer.layers.feed_forward",
    "keras_transformer.layers.positional_encoding",
    "keras_transformer.layers.embedding",
    "keras_transformer.layers.encoder",
    "keras_transformer.layers.decoder",
    "keras_transformer.models.config",
]


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name):
    module = importlib.import_module(name)
    result = doctest.testmod(module, extraglobs={"keras": importlib.import_module("keras")})
    assert result.attempted > 0, f"{name} has no example"
    assert result.failed == 0
