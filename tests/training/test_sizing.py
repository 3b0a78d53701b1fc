"""Choosing the model width for a time budget: the rule (with update times
given), the timed update (a real training step), and the demo's choice
between `--width`, a resumed run and the measurement."""

import argparse

import keras
import numpy as np
import pytest

from keras_transformer.commands import demo
from keras_transformer.models import SMALL
from keras_transformer.training import sizing


def fake_times(monkeypatch, seconds_by_width):
    timed = []

    def update_seconds(config, vocab_size, precision="float32"):
        timed.append(config.d_model)
        assert config.d_ff == 4 * config.d_model
        return seconds_by_width[config.d_model]

    monkeypatch.setattr(sizing, "update_seconds", update_seconds)
    return timed


@pytest.mark.parametrize("budget, expected, timed", [
    (1200, 256, [256]),              # 3,000 updates of 0.4 s: the preset's width
    (900, 192, [256, 192]),          # 2,250 at 256, 3,600 at 192
    (300, 128, [256, 192, 128]),     # 750 / 1,200 / 1,875: none reaches 3,000, the narrowest
])
def test_the_widest_width_that_makes_enough_updates_is_chosen(monkeypatch, budget, expected, timed):
    seen = fake_times(monkeypatch, {256: 0.4, 192: 0.25, 128: 0.16})
    width, table = sizing.choose_width(SMALL, 8000, budget, report=lambda line: None)
    assert width == expected
    assert seen == timed  # the narrower widths are not timed once one qualifies
    assert [row[2] for row in table] == [int(budget / {256: 0.4, 192: 0.25, 128: 0.16}[w])
                                         for w in timed]


def test_narrowed_keeps_everything_but_the_widths():
    config = sizing.narrowed(SMALL, 192)
    assert (config.d_model, config.d_ff) == (192, 768)
    assert config.replace(d_model=SMALL.d_model, d_ff=SMALL.d_ff) == SMALL


@pytest.mark.slow
def test_the_timed_step_is_a_training_update(tiny_config, learning_seed):
    """The callable `update_seconds` times trains the model: its loss on
    the one fixed batch falls (a short warmup, so that it moves in 30)."""
    keras.utils.set_random_seed(1234 + learning_seed)
    step = sizing.synthetic_step(tiny_config.replace(warmup_steps=10), 50, batch=8, length=6,
                                 seed=learning_seed)
    losses = [step() for _ in range(30)]
    print(f"loss after 30 updates: {losses[-1] / losses[0]:.3f} of the first")
    assert np.isfinite(losses).all()
    assert losses[-1] < 0.9 * losses[0]
    assert sizing.update_seconds(tiny_config.replace(batch_tokens=256), 50, repeats=2) > 0


def demo_args(tmp_path, **changes):
    args = dict(output=str(tmp_path / "run"), width="auto", preset="small", minutes=15.0,
                vocab_size=8000)
    args.update(changes)
    return argparse.Namespace(**args)


def test_the_demo_measures_only_for_the_small_preset_with_a_budget(monkeypatch, tmp_path):
    fake_times(monkeypatch, {256: 0.4, 192: 0.25, 128: 0.16})
    monkeypatch.setattr(demo, "print", lambda *a, **k: None, raising=False)
    assert demo.width(demo_args(tmp_path), "float32") == 192
    assert demo.width(demo_args(tmp_path, minutes=0.0), "float32") == 256
    assert demo.width(demo_args(tmp_path, preset="base"), "float32") == 512
    assert demo.width(demo_args(tmp_path, width="128"), "float32") == 128


def test_a_resumed_demo_keeps_its_width(monkeypatch, tmp_path):
    fake_times(monkeypatch, {256: 0.1, 192: 0.1, 128: 0.1})  # would choose 256
    run = tmp_path / "run"
    run.mkdir()
    (run / "config.json").write_text(sizing.narrowed(SMALL, 192).to_json())
    assert demo.width(demo_args(tmp_path), "float32") == 192
