"""`keras_transformer.run_folder`: what a run or export folder is, the
tokenizer each kind of folder holds (in TensorFlow ops and in plain Python,
the same ids), its languages, loading its model with one-line errors, and
writing it."""

import json
import shutil

import numpy as np
import pytest

from helpers.small_run import WORDS
from keras_transformer import run_folder
from keras_transformer.data import Tokenizer
from keras_transformer.decoding import Translator
from keras_transformer.export import export_run
from keras_transformer.pretrained.fsmt_tokenizer import FsmtTokenizer
from keras_transformer.pretrained.marian_tokenizer import MarianTokenizer
from keras_transformer.vocabularies.fsmt import FsmtVocabulary
from keras_transformer.vocabularies.marian import MarianVocabulary
from keras_transformer.vocabularies.sentencepiece_text import SentencePieceText

SENTENCES = ["der Baum ist groß und das Haus ist klein.", "ein Haus war hier.", "das Haus.", ""]


@pytest.mark.slow
def test_a_folder_is_a_run_an_export_or_neither(small_run, small_export, tmp_path):
    assert run_folder.folder_kind(small_run) == "run"
    assert run_folder.folder_kind(small_export) == "export"
    assert run_folder.model_config(small_run) == run_folder.model_config(small_export)
    assert run_folder.model_config(small_run)["d_model"] == 32
    (tmp_path / "config.json").write_text("{}")  # a config without a model
    for path, message in ((tmp_path, "is neither a run folder"),
                          (tmp_path / "missing", "is not a folder")):
        with pytest.raises(ValueError, match=message):
            run_folder.folder_kind(path)


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["ours", "marian", "fsmt"])
def test_each_kind_of_tokenizer_is_known_by_its_files_and_gives_the_same_ids_in_python(
        kind, small_run, hf_models):
    folder = small_run if kind == "ours" else getattr(hf_models, kind)()[0]
    graph_type, text_type = {"ours": (Tokenizer, SentencePieceText),
                             "marian": (MarianTokenizer, MarianVocabulary),
                             "fsmt": (FsmtTokenizer, FsmtVocabulary)}[kind]
    tokenizer = run_folder.load_tokenizer(folder)
    text_tokenizer = run_folder.load_text_tokenizer(folder)
    assert (type(tokenizer), type(text_tokenizer)) == (graph_type, text_type)
    # The plain-Python vocabulary each one holds too (what `Translator`
    # tokenizes a lone sentence with, and detokenizes its translation).
    assert type(tokenizer.vocabulary) is text_type
    texts = [" ".join(WORDS[:n]) for n in (1, 5, 17)] + [
        "", "  Größe,\tnaïve  Café — 3,14 € 😀 ", "ß" * 40, "x\u200by \u00a0z. Ende!"]
    expected = tokenizer.tokenize(texts).to_list()
    assert expected == [text_tokenizer.encode(t) for t in texts]
    assert expected == [tokenizer.vocabulary.encode(t) for t in texts]
    # Target ids, the specials among them (end, padding, start) anywhere.
    rng = np.random.default_rng(0)
    specials = [tokenizer.eos_id, tokenizer.pad_id, tokenizer.bos_id]
    rows = np.where(rng.random((40, 12)) < 0.15, rng.choice(specials, (40, 12)),
                    rng.integers(0, tokenizer.target_vocab_size, (40, 12)))
    assert [text.decode() for text in tokenizer.detokenize(rows).numpy()] == [
        tokenizer.vocabulary.decode(row) for row in rows]
    assert run_folder.tokenizer_from_files(run_folder.tokenizer_files(tokenizer)).tokenize(
        texts).to_list() == tokenizer.tokenize(texts).to_list()


def test_a_folder_without_a_tokenizer_says_what_it_expected(tmp_path):
    assert not run_folder.has_tokenizer(tmp_path)
    for load in (run_folder.load_tokenizer, run_folder.load_text_tokenizer):
        with pytest.raises(ValueError, match="No tokenizer in .*expected tokenizer.model"):
            load(tmp_path)


def test_loading_a_model_names_what_is_missing_or_damaged(small_run, tmp_path):
    assert run_folder.load_model(small_run).config.d_model == 32  # model.keras: no average
    with pytest.raises(FileNotFoundError, match="is not a folder"):
        run_folder.load_model(tmp_path / "missing")
    with pytest.raises(FileNotFoundError, match=r"No model in .*averaged.keras.*model.keras"):
        run_folder.load_model(tmp_path)
    (tmp_path / "model.keras").write_bytes(b"not a zip")
    with pytest.raises(ValueError, match="Cannot load the model"):
        run_folder.load_model(tmp_path)
    with pytest.raises(ValueError, match=r"--init-from .*: no config.json there"):
        run_folder.load_config(tmp_path)


def test_a_checkpoint_loads_as_the_model_of_its_config(small_run):
    checkpoint = str(next((small_run / "checkpoints").glob("*.index"))).removesuffix(".index")
    model = run_folder.load_model(small_run, checkpoint=checkpoint)
    for got, want in zip(model.get_weights(), run_folder.load_model(small_run).get_weights()):
        np.testing.assert_array_equal(got, want)


@pytest.mark.slow
def test_the_set_penalty_is_what_the_run_decodes_with(small_run, tmp_path):
    run = tmp_path / "run"
    shutil.copytree(small_run, run)
    shutil.copy(run / "model.keras", run / "averaged.keras")
    before, tokenizer = run_folder.load_model(small_run), run_folder.load_tokenizer(small_run)
    run_folder.set_length_penalty(run, 1.5)
    assert run_folder.load_config(run).length_penalty == 1.5
    for name in ("averaged.keras", "model.keras"):
        translator = Translator.from_directory(run, model_file=name)
        assert translator.alpha == 1.5
        assert translator.model.config == before.config.replace(length_penalty=1.5)
        for got, want in zip(translator.model.get_weights(), before.get_weights()):
            np.testing.assert_array_equal(got, want)
    assert (Translator.from_directory(run).translate(SENTENCES)
            == Translator(before, tokenizer, alpha=1.5).translate(SENTENCES))


@pytest.mark.slow
def test_an_imported_model_is_written_as_a_run_whole(small_run, tmp_path):
    model, tokenizer = run_folder.load_model(small_run), run_folder.load_tokenizer(small_run)
    origin = {"source": "hf://Helsinki-NLP/opus-mt-de-en"}
    run_folder.save_run(model, tokenizer, tmp_path / "run", origin)
    assert sorted(path.name for path in (tmp_path / "run").iterdir()) == [
        "averaged.keras", "config.json", "pretrained.json", "tokenizer.model"]
    assert run_folder.folder_kind(tmp_path / "run") == "run"
    assert run_folder.languages(tmp_path / "run") == ("de", "en")
    assert (Translator.from_directory(tmp_path / "run").translate(SENTENCES)
            == Translator(model, tokenizer).translate(SENTENCES))
    with pytest.raises(FileExistsError):
        run_folder.save_run(model, tokenizer, tmp_path / "run", origin)


@pytest.mark.parametrize("files, pair", [
    ({"run.json": {"options": {"dataset": "ding", "source_language": None,
                               "target_language": None}}}, ("de", "en")),
    ({"run.json": {"options": {"dataset": "ding", "source_language": "en",
                               "target_language": "de"}}}, ("en", "de")),
    ({"run.json": {"options": {"dataset": "ted_hrlr_translate/pt_to_en"}}}, ("pt", "en")),
    ({"run.json": {"options": {"dataset": "wmt14_translate/de-en", "source_language": "en",
                               "target_language": "de"}}}, ("en", "de")),
    ({"pretrained.json": {"source": "hf://Helsinki-NLP/opus-mt-de-en"}}, ("de", "en")),
    ({"pretrained.json": {"source": "hf://facebook/wmt19-en-de"}}, ("en", "de")),
    ({"export.json": {"config": {}, "languages": ["fr", "en"]}}, ("fr", "en")),
    ({"run.json": {"options": {"dataset": "/data/mine"}}}, None),
    ({}, None),
])
def test_the_languages_of_a_folder_come_from_what_it_holds(tmp_path, files, pair):
    for name, content in files.items():
        (tmp_path / name).write_text(json.dumps(content))
    assert run_folder.languages(str(tmp_path)) == pair


@pytest.mark.slow
def test_an_export_keeps_the_languages_of_its_run(small_run, tmp_path):
    run = tmp_path / "run"
    shutil.copytree(small_run, run)
    (run / "run.json").write_text(json.dumps({"options": {"dataset": "ding"}}))
    export_run(str(run), str(tmp_path / "export"), formats=["keras"])
    assert run_folder.languages(str(tmp_path / "export")) == ("de", "en")
