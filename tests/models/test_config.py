"""TransformerConfig: the paper's presets, Table 3 overrides, and validation."""

import pytest

from keras_transformer.models import BASE, BIG, PRESETS, TABLE3_VARIANTS, TransformerConfig


def test_presets_hold_the_papers_values():
    assert (BASE.num_encoder_layers, BASE.num_decoder_layers, BASE.d_model, BASE.d_ff,
            BASE.num_heads, BASE.head_key_dim, BASE.head_value_dim, BASE.dropout,
            BASE.label_smoothing) == (6, 6, 512, 2048, 8, 64, 64, 0.1, 0.1)
    assert (BIG.d_model, BIG.d_ff, BIG.num_heads, BIG.head_key_dim, BIG.dropout) == (
        1024, 4096, 16, 64, 0.3)
    assert not BASE.norm_first and BASE.positional_encoding == "sinusoidal"
    assert PRESETS["base"] is BASE and PRESETS["big"] is BIG
    assert (BIG.train_steps, BIG.average_checkpoints, BASE.train_steps, BASE.average_checkpoints) == (
        300_000, 20, 100_000, 5)
    assert (BASE.warmup_steps, BASE.adam_beta_1, BASE.adam_beta_2, BASE.adam_epsilon) == (4000, 0.9, 0.98, 1e-9)
    assert (BASE.beam_size, BASE.length_penalty, BASE.decode_margin, BASE.batch_tokens) == (4, 0.6, 50, 25000)


def test_table3_variants_are_valid_overrides_of_base():
    row_a = {name: BASE.replace(**TABLE3_VARIANTS[name]) for name in ("A-h1", "A-h4", "A-h16", "A-h32")}
    # Row (A) keeps h * d_k = 512: constant computation.
    assert {c.num_heads * c.head_key_dim for c in row_a.values()} == {512}
    assert BASE.replace(**TABLE3_VARIANTS["B-dk16"]).head_value_dim == 64
    assert BASE.replace(**TABLE3_VARIANTS["E-learned"]).positional_encoding == "learned"
    for overrides in TABLE3_VARIANTS.values():
        BASE.replace(**overrides)


def test_json_round_trip():
    config = BIG.replace(norm_first=True, key_dim=32)
    assert TransformerConfig.from_json(config.to_json()) == config


@pytest.mark.parametrize(
    "overrides, field, allowed",
    [
        (dict(d_model=500), "d_model=500", "multiple of num_heads"),
        (dict(num_heads=0), "num_heads", "positive integer"),
        (dict(num_encoder_layers=-1), "num_encoder_layers", "positive integer"),
        (dict(d_ff=2.5), "d_ff", "positive integer"),
        (dict(dropout=1.0), "dropout", r"\[0, 1\)"),
        (dict(dropout=-0.1), "dropout", r"\[0, 1\)"),
        (dict(label_smoothing=1.5), "label_smoothing", r"\[0, 1\)"),
        (dict(attention_dropout=True), "attention_dropout", r"\[0, 1\)"),
        (dict(key_dim=0), "key_dim", "positive integer"),
        (dict(positional_encoding="rotary"), "positional_encoding", "sinusoidal"),
        (dict(activation="nope"), "activation", "Keras activation"),
        (dict(max_length=0), "max_length", "positive integer"),
        (dict(d_model=7, num_heads=1), "d_model", "even"),
        (dict(norm_first="yes"), "norm_first", "True or False"),
        (dict(adam_beta_2=1.0), "adam_beta_2", r"\[0, 1\)"),
        (dict(adam_epsilon=0.0), "adam_epsilon", "positive number"),
        (dict(warmup_steps=0), "warmup_steps", "positive integer"),
        (dict(batch_tokens=100), "batch_tokens", "at least max_length=256"),
        (dict(length_penalty=-0.5), "length_penalty", ">= 0"),
        (dict(decode_margin=-1), "decode_margin", ">= 0"),
        (dict(beam_size=0), "beam_size", "positive integer"),
    ],
)
def test_bad_values_name_the_field_and_the_allowed_range(overrides, field, allowed):
    with pytest.raises(ValueError, match=field) as error:
        BASE.replace(**overrides)
    assert error.match(allowed)


def test_indivisible_width_is_fine_with_explicit_head_size():
    assert BASE.replace(d_model=500, key_dim=64, value_dim=64).head_key_dim == 64


def test_unknown_fields_are_listed():
    with pytest.raises(ValueError, match=r"Unknown TransformerConfig field\(s\) \['heads'\]"):
        BASE.replace(heads=4)
    with pytest.raises(ValueError, match="Unknown"):
        TransformerConfig.from_dict({"layers": 6})
