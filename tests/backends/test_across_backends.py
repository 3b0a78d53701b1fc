"""`.keras` files move between backends. A model saved here loads on this
backend's partner (`helpers.backends.partner`: TensorFlow's files go to
JAX, JAX's to PyTorch, PyTorch's to TensorFlow), in a process of its own,
and gives the same logits there, from the full pass and from cached
decoding; a compiled one keeps the paper's loss and optimizer; the file
the partner saves again loads back here with the same weights. Over the
three backend runs each backend so loads files of both others. And a file
the previous release (0.1.0) wrote on TensorFlow gives its recorded logits
here."""

import pathlib

import keras
import numpy as np
import pytest

from helpers import processes
from helpers.backends import batch, numpy, partner, small_model, small_models
from keras_transformer.training import LabelSmoothedCrossEntropy, paper_optimizer

DATA = pathlib.Path(__file__).parent / "data"
TOLERANCE = 1e-5
COMPILED = "marian_ids"


@pytest.fixture(scope="module")
def exchange(tmp_path_factory):
    """Saves each small model here, then has the partner backend load them
    (in a process of its own) and save them again. Returns the folder and
    `{name: (model, logits here)}`. The model with Marian's special ids is
    saved compiled with the paper's loss (padding id 39) and optimizer."""
    folder = tmp_path_factory.mktemp("exchange")
    models = {}
    for name in small_models():
        model = small_model(name)
        if name == COMPILED:
            model.compile(optimizer=paper_optimizer(model.config),
                          loss=LabelSmoothedCrossEntropy(pad_id=model.config.pad_id))
        source, target = batch(model.config)
        np.savez(folder / f"{name}.npz", source_ids=source, target_ids=target)
        model.save(folder / f"{name}.keras")
        models[name] = (model, numpy(model({"source_ids": source, "target_ids": target})))
    job = processes.start("helpers.backend_job", folder, *small_models(),
                          KERAS_BACKEND=partner())
    output, _ = job.communicate(timeout=300)
    assert job.returncode == 0, output[-3000:]
    return folder, models


@pytest.mark.slow
@pytest.mark.parametrize("backend", [partner()])
@pytest.mark.parametrize("name", sorted(small_models()))
def test_a_model_saved_here_gives_the_same_logits_on_another_backend(exchange, name, backend):
    folder, models = exchange
    _, expected = models[name]
    there = np.load(folder / f"{name}.{backend}.npz")
    difference = np.abs(there["logits"] - expected).max()
    print(f"{name}: {keras.backend.backend()} -> {backend}: max logit difference {difference:.2e}")
    np.testing.assert_allclose(there["logits"], expected, atol=TOLERANCE)
    np.testing.assert_allclose(there["steps"], expected, atol=TOLERANCE)  # cached decoding


@pytest.mark.slow
@pytest.mark.parametrize("backend", [partner()])
@pytest.mark.parametrize("name", sorted(small_models()))
def test_a_model_saved_on_another_backend_loads_here(exchange, name, backend):
    folder, models = exchange
    model, _ = models[name]
    loaded = keras.models.load_model(folder / f"{name}.{backend}.keras", safe_mode=True)
    assert loaded.config == model.config
    assert [w.path for w in loaded.weights] == [w.path for w in model.weights]
    for ours, theirs in zip(model.weights, loaded.weights):
        np.testing.assert_array_equal(numpy(theirs), numpy(ours))
    ids = np.load(folder / f"{name}.npz")
    logits = numpy(loaded({"source_ids": ids["source_ids"], "target_ids": ids["target_ids"]}))
    np.testing.assert_allclose(logits, np.load(folder / f"{name}.{backend}.npz")["logits"],
                               atol=TOLERANCE)
    if name == COMPILED:
        # Compiled with Keras' Adam there. (Saved on PyTorch, it is Keras'
        # PyTorch-only subclass of Adam, which loads but cannot train
        # elsewhere: Keras 3.15 records its module in the file.)
        assert isinstance(loaded.optimizer, keras.optimizers.Adam)
        assert isinstance(loaded.loss, LabelSmoothedCrossEntropy)
        assert loaded.loss.pad_id == model.config.pad_id


@pytest.mark.slow
@pytest.mark.parametrize("backend", [partner()])
def test_a_compiled_model_keeps_the_papers_loss_and_optimizer_on_another_backend(exchange,
                                                                                  backend):
    # `paper_optimizer` is FusedAdam on TensorFlow, Keras' Adam elsewhere; a
    # FusedAdam saved on TensorFlow loads as Keras' Adam (the same updates).
    folder, models = exchange
    expected = "FusedAdam" if keras.backend.backend() == "tensorflow" else "Adam"
    assert type(models[COMPILED][0].optimizer).__name__ == expected
    there = np.load(folder / f"{COMPILED}.{backend}.npz")
    assert str(there["optimizer"]) == "Adam"
    assert int(there["loss_pad_id"]) == models[COMPILED][0].config.pad_id


def test_a_file_written_by_the_previous_release_on_tensorflow():
    # A pre-norm model with separate vocabularies, saved by keras-transformer
    # 0.1.0 on TensorFlow after one Adam step, with the logits it gave there.
    recorded = np.load(DATA / "transformer_0.1.0.npz")
    loaded = keras.models.load_model(DATA / "transformer_0.1.0.keras", safe_mode=True)
    logits = numpy(loaded({"source_ids": recorded["source_ids"],
                           "target_ids": recorded["target_ids"]}))
    np.testing.assert_allclose(logits, recorded["logits"], atol=TOLERANCE)
    # The weights keep their order too (on every backend): training
    # checkpoints store the optimizer's slots by the index of their weight.
    assert [w.path for w in loaded.weights] == recorded["weight_paths"].tolist()
