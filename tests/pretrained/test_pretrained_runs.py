"""An imported Marian model as a run folder: the import command, the
exports (SavedModel in a fresh process, the ONNX runner without
TensorFlow), and fine-tuning with `--init-from` on Ding pairs."""

import json
import os
import subprocess
import sys

import keras
import numpy as np
import pytest

from helpers import processes
from helpers.marian_files import sentence_pairs
from helpers.processes import FRESH_TEXT_PROCESS, ONNX_ONLY_PROCESS
from keras_transformer import run_folder
from keras_transformer.decoding import Translator
from keras_transformer.export import export_run
from keras_transformer.pretrained import from_preset
from keras_transformer.run_folder import RunOptions
from keras_transformer.training.run import run_training

pytestmark = pytest.mark.slow  # trains or runs jobs in processes of their own

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SENTENCES = ["", "Der Hund sieht einen roten Apfel.", "Die Katze mag das Buch!",
             "Mein Bruder braucht 3 Flaschen Wasser.", "Das Mädchen öffnet die Tür im Garten."]


@pytest.fixture(scope="module")
def imported_run(hf_models, tmp_path_factory):
    """A small trained Marian folder imported with the README's command."""
    folder, _, _ = hf_models.marian()
    run = tmp_path_factory.mktemp("runs") / "opus"
    command = [sys.executable, os.path.join(ROOT, "examples", "import_pretrained.py"),
               str(folder), "--output", str(run)]
    result = subprocess.run(command, capture_output=True, text=True, env=processes.environment(),
                            timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    assert "Imported" in result.stdout
    # A second import into the same folder is refused, and changes nothing.
    before = (run / "averaged.keras").read_bytes()
    again = subprocess.run(command, capture_output=True, text=True, env=processes.environment(),
                           timeout=300)
    assert again.returncode != 0 and "exists" in again.stderr and "Traceback" not in again.stderr
    assert (run / "averaged.keras").read_bytes() == before
    return folder, run


def test_the_run_folder_translates_like_the_imported_model(imported_run):
    folder, run = imported_run
    assert sorted(os.listdir(run)) == ["averaged.keras", "config.json", "pretrained.json",
                                       "source.spm", "target.spm", "vocab.json"]
    model, tokenizer = from_preset(str(folder))
    expected = Translator(model, tokenizer).translate(SENTENCES)
    assert Translator.from_directory(str(run)).translate(SENTENCES) == expected
    assert expected[0] == "" and all(expected[1:])


@pytest.fixture(scope="module")
def exported(imported_run, tmp_path_factory):
    _, run = imported_run
    output = tmp_path_factory.mktemp("exports") / "opus"
    export_run(str(run), str(output), formats=["saved_model", "onnx"])
    return run, output


def test_exported_saved_model_translates_in_a_fresh_process(exported):
    run, output = exported
    result = subprocess.run(
        [sys.executable, "-c", FRESH_TEXT_PROCESS, str(output / "saved_model"),
         json.dumps(SENTENCES)],
        capture_output=True, text=True, env=processes.environment(), check=True, timeout=300)
    served = json.loads(result.stdout.strip().splitlines()[-1])
    translator = Translator.from_directory(str(run))
    assert served["default"] == translator.translate(SENTENCES)
    n_best = Translator.from_directory(str(run), beam_size=3, decode_margin=6).translate(
        SENTENCES, n_best=3)
    assert served["n_best"] == [[text for text, _ in row] for row in n_best]


def test_exported_onnx_runner_translates_without_tensorflow(exported):
    run, output = exported
    result = subprocess.run(
        [sys.executable, "-c", ONNX_ONLY_PROCESS, str(output / "onnx"), json.dumps(SENTENCES)],
        capture_output=True, text=True, check=True, timeout=300)
    translated = json.loads(result.stdout.strip().splitlines()[-1])
    assert translated["loaded"] == []
    assert translated["translations"] == Translator.from_directory(str(run)).translate(SENTENCES)


def _write_ding(path, pairs):
    """Pairs in the Ding dictionary's line format (`de :: en`)."""
    path.write_text("".join(f"{de} :: {en}\n" for de, en in pairs), encoding="utf-8")
    return str(path)


def test_fine_tuning_lowers_the_validation_loss_and_resumes_from_its_own_checkpoint(
        imported_run, tmp_path, learning_seed):
    _, run = imported_run
    # A domain the model has not seen: dictionary entries with numbered
    # words, beside some of its sentences.
    words = [(f"Wort {i} und Haus {i % 7}", f"word {i} and house {i % 7}") for i in range(600)]
    ding = _write_ding(tmp_path / "de-en", words + sentence_pairs()[:200])
    options = RunOptions(output_dir=str(tmp_path / "tuned"), init_from=str(run), dataset="ding",
                         ding_path=ding, data_dir=str(tmp_path / "tfds"), steps=200,
                         batch_tokens=1024, checkpoint_every_steps=100, eval_every_steps=200,
                         bleu_sentences=0, keep_checkpoints=2, seed=1234 + learning_seed,
                         verbose=0)
    first = run_training(options)
    initial_loss = _validation_loss_of(run, options)
    print(f"validation loss after 200 updates: {first['last_logs']['val_loss'] / initial_loss:.3f} "
          "of the imported model's")
    assert first["start_step"] == 0 and first["final_step"] == 200
    assert first["last_logs"]["val_loss"] < 0.9 * initial_loss, (first["last_logs"], initial_loss)
    config = json.loads((tmp_path / "tuned" / "config.json").read_text())
    assert config["warmup_steps"] == 500 and config["pad_id"] == json.loads(
        (run / "config.json").read_text())["pad_id"]
    assert sorted(f for f in os.listdir(tmp_path / "tuned") if f.endswith((".json", ".spm"))) == [
        "config.json", "run.json", "source.spm", "target.spm", "vocab.json"]

    # Resuming the finished run restores its own last checkpoint and reads
    # its own tokenizer (it runs even with the imported run moved away): its
    # weights stay the fine-tuned ones, not the imported ones.
    tuned = keras.models.load_model(str(tmp_path / "tuned" / "model.keras"))
    os.rename(run, str(run) + ".away")
    try:
        second = run_training(options)
    finally:
        os.rename(str(run) + ".away", run)
    assert second["start_step"] == 200 and second["final_step"] == 200
    resumed = keras.models.load_model(str(tmp_path / "tuned" / "model.keras"))
    imported = keras.models.load_model(str(run / "averaged.keras"))
    for a, b, c in zip(tuned.get_weights(), resumed.get_weights(), imported.get_weights()):
        np.testing.assert_array_equal(a, b)
    assert any(not np.array_equal(a, c) for a, c in zip(tuned.get_weights(), imported.get_weights()))


def _validation_loss_of(run, options):
    """The imported model's label-smoothed validation loss on the run's
    validation batches (what `val_loss` measures)."""
    from keras_transformer import data
    from keras_transformer.training import Trainer, make_strategy, paper_optimizer

    model = keras.models.load_model(str(run / "averaged.keras"))
    tokenizer = run_folder.load_tokenizer(str(run))
    corpus = data.corpus("ding", data_dir=options.data_dir, ding_path=options.ding_path)
    batches = data.token_batches(data.encode_pairs(corpus.pairs("validation"), tokenizer),
                                 options.batch_tokens, model.config.max_length,
                                 pad_id=model.config.pad_id)
    trainer = Trainer(model, paper_optimizer(model.config), make_strategy("default"),
                      model.config.label_smoothing)
    return trainer.evaluate(batches)["loss"]


def test_import_command_refuses_bad_sources_in_one_line_and_writes_nothing(tmp_path):
    (tmp_path / "bart").mkdir()
    (tmp_path / "bart" / "config.json").write_text(json.dumps({"model_type": "bart"}))
    for source, message in ((tmp_path / "bart", "model_type 'bart' is not supported"),
                            (tmp_path / "missing", "is not a folder")):
        result = subprocess.run(
            [sys.executable, os.path.join(ROOT, "examples", "import_pretrained.py"), str(source),
             "--output", str(tmp_path / "out")],
            capture_output=True, text=True, env=processes.environment(), timeout=300)
        assert result.returncode != 0 and message in result.stderr
        assert "Traceback" not in result.stderr and len(result.stderr.strip().splitlines()) == 1
        assert sorted(os.listdir(tmp_path)) == ["bart"]
