"""A small run folder made in seconds, for tests of everything that reads
one (translation, evaluation, export, the commands): a SentencePiece model,
config.json, model.keras and a checkpoint. The model is untrained, with its
embedding scaled up so that its next-token distributions are peaked (clear
winners, no near-ties), and its translations are real, varied strings."""

import json
import shutil

import keras
import numpy as np

from keras_transformer.data import train_tokenizer
from keras_transformer.models import BASE, transformer
from keras_transformer.training import CheckpointCallback, make_strategy

CONFIG = BASE.replace(num_encoder_layers=2, num_decoder_layers=2, d_model=32, d_ff=64, num_heads=4,
                      max_length=24, decode_margin=6)
WORDS = "der die das Haus Baum groß klein ist war hier dort und oder nicht ein eine".split()


UNIGRAM_VOCAB_SIZE = 40
"""A unigram SentencePiece model of these words has at most 42 pieces."""


def write_small_run(folder, tokenizer_type="bpe", config=CONFIG):
    """Writes the run into `folder` (a pathlib.Path that exists) and returns
    it; `tokenizer_type` "unigram" trains a unigram SentencePiece model of
    `UNIGRAM_VOCAB_SIZE` pieces instead of a BPE one of 60."""
    rng = np.random.default_rng(0)
    texts = [" ".join(rng.choice(WORDS, size=rng.integers(3, 10))) + "." for _ in range(500)]
    vocab_size = UNIGRAM_VOCAB_SIZE if tokenizer_type == "unigram" else 60
    train_tokenizer(texts, folder / "tokenizer.model", vocab_size=vocab_size,
                    model_type=tokenizer_type)
    keras.utils.set_random_seed(0)
    model = transformer(config, vocab_size)
    for weight in model.weights:
        if "embeddings" in weight.path:
            weight.assign(weight * 4.0)
    model.save(folder / "model.keras")
    (folder / "config.json").write_text(config.to_json())
    optimizer = keras.optimizers.Adam()
    optimizer.build(model.trainable_variables)
    CheckpointCallback(folder / "checkpoints", model, optimizer, make_strategy("default"),
                       every_steps=1).save()
    return folder


def pair_runs(small_run, folder, pairs=(("de", "en"), ("en", "fr"))):
    """Copies of the run in `small_run`, one for each `(source, target)` of
    `pairs` (their run.json saying so), in `folder`: a server of several
    models, German -> French through English. Returns their paths."""
    runs = []
    for source, target in pairs:
        run = folder / f"{source}-{target}"
        shutil.copytree(small_run, run)
        (run / "run.json").write_text(json.dumps({"options": {
            "dataset": "local", "source_language": source, "target_language": target}}))
        runs.append(run)
    return runs
