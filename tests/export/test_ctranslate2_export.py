"""The CTranslate2 export: float32 exact against the Keras model (token
log-probabilities and greedy tokens), its beam search against ours, int8,
imported Marian and FSMT models, the TensorFlow-free translator, the
command, and bad input."""

import json
import os
import subprocess
import sys

import ctranslate2
import keras
import numpy as np
import pytest
import tensorflow as tf

from helpers import processes
from helpers.commands import command
from helpers.processes import CTRANSLATE2_ONLY_PROCESS
from helpers.small_run import WORDS
from keras_transformer import run_folder
from keras_transformer.data import Tokenizer, train_tokenizer
from keras_transformer.decoding import Translator, beam_search, greedy_search
from keras_transformer.export import ctranslate2_model, export_run
from keras_transformer.runtimes.ctranslate2_runner import CTranslate2Translator
from keras_transformer.models import BASE, transformer
from keras_transformer.pretrained import from_preset, save_run

# The last sentence is cut to the small run's length on purpose.
pytestmark = pytest.mark.filterwarnings("ignore::keras_transformer.textfiles.TruncationWarning")
SENTENCES = ["", "Das Haus ist groß.", "der Baum und das Haus", "Hier war ein Haus nicht klein.",
             " ".join(["Haus Baum groß"] * 12)]
GERMAN = ["Der Hund sieht einen roten Apfel.", "Die Katze mag das Buch!", "Der König",
          "Mein Bruder braucht 3 Flaschen Wasser.", "Das Mädchen öffnet die Tür im Garten."]
ENGLISH = ["The dog sees a red apple.", "The cat likes the book!", "An old man",
           "My brother needs 3 bottles of water.", "The girl opens the door."]


# ------------------------------------------------------------- references

def _padded(rows, pad_id, first=()):
    """Id lists -> an int32 array, `first` before each row, padded."""
    rows = [list(first) + list(row) for row in rows]
    array = np.full((len(rows), max(map(len, rows))), pad_id, np.int32)
    for i, row in enumerate(rows):
        array[i, :len(row)] = row
    return array


def keras_log_probs(model, sources, targets):
    """Per pair, the Keras model's log-probability of each target token and
    of the end token after it, teacher forced, in one padded batch."""
    config = model.config
    source = _padded([s + [config.eos_id] for s in sources], config.pad_id)
    target = _padded(targets, config.pad_id, first=[config.decoder_start_id])
    log_probs = tf.nn.log_softmax(model({"source_ids": source, "target_ids": target})).numpy()
    return [log_probs[row, np.arange(len(t) + 1), t + [config.eos_id]]
            for row, t in enumerate(targets)]


def keras_search(model, sources, **options):
    """Our search on id lists (without the end id): each sentence's best
    tokens up to its end id, and its score."""
    config = model.config
    source = _padded([s + [config.eos_id] for s in sources], config.pad_id)
    search = beam_search if options.get("beam_size", 1) > 1 else greedy_search
    if search is greedy_search:
        options.pop("beam_size", None)
    result = search(model, source, **options)
    best = []
    for row, score in zip(result.tokens.numpy()[:, 0], result.scores.numpy()[:, 0]):
        ids = [int(i) for i in row]
        best.append((ids[:ids.index(config.eos_id) + 1], float(score)))
    return best


def assert_exact(model, translator, sources, targets, decode_margin=5):
    """float32 CTranslate2 = Keras: log-probabilities within 1e-4 (padded
    batch of different lengths) and greedy tokens equal (a small margin:
    untrained models run to the length limit, which is then tested too)."""
    expected = keras_log_probs(model, sources, targets)
    scored = translator.score(sources, targets)
    difference = max(np.abs(np.array(s) - e).max() for s, e in zip(scored, expected))
    assert difference < 1e-4, difference
    greedy = translator.search(sources, beam_size=1, decode_margin=decode_margin)
    assert [found[0][0] for found in greedy] == [
        ids for ids, _ in keras_search(model, sources, decode_margin=decode_margin)]


# ------------------------------------------------------ random base model

@pytest.mark.slow
def test_random_base_model_float32_is_exact(tmp_path):
    tokenizer = train_tokenizer([" ".join(WORDS[i:] + WORDS[:i]) for i in range(len(WORDS))] * 20,
                                tmp_path / "tokenizer.model", vocab_size=100)
    model = transformer(BASE, tokenizer.vocab_size)
    translator = CTranslate2Translator(ctranslate2_model.save(model, tokenizer, str(tmp_path / "ct2")))
    sources = [tokenizer.vocabulary.encode(s) for s in SENTENCES[1:4]] + [[5]]
    targets = [list(reversed(s)) for s in sources[:3]] + [[7, 9, 11, 13, 15]]
    assert_exact(model, translator, sources, targets)


VARIANTS = {
    "post-norm relu, paper sinusoid": {},
    "pre-norm gelu, learned positions, separate vocabularies": dict(
        norm_first=True, activation="gelu", positional_encoding="learned",
        shared_vocabulary=False),
    "swish, fairseq sinusoid, no embedding scale, logits bias, fairseq ids": dict(
        activation="silu", sinusoid="fairseq", scale_embedding=False, logits_bias=True,
        pad_id=1, eos_id=2, decoder_start_id=2, unk_id=3, layer_norm_epsilon=1e-5),
    "marian sinusoid and ids, heads of 8 on d_model 16": dict(
        sinusoid="marian", key_dim=8, value_dim=8, pad_id=39, decoder_start_id=39, eos_id=0),
}


@pytest.mark.parametrize("overrides", VARIANTS.values(), ids=VARIANTS.keys())
def test_every_config_variant_scores_exactly(tiny_config, overrides, tmp_path):
    """CTranslate2's own `score_batch` on the exported spec (no translator)
    against the Keras model, for the conventions the config allows."""
    config = tiny_config.replace(**overrides)
    model = transformer(config, 40, 40 if config.shared_vocabulary else 30)
    for weight in model.weights:  # norms and biases away from their initial values
        weight.assign(weight + keras.random.normal(weight.shape, stddev=0.1, seed=3))
    source_tokens = [f"t{i}" for i in range(model.source_vocab_size)]
    target_tokens = source_tokens[:model.target_vocab_size]
    ctranslate2_model.transformer_spec(model, source_tokens, target_tokens).save(str(tmp_path))
    translator = ctranslate2.Translator(str(tmp_path))
    rng = np.random.default_rng(0)
    specials = {config.pad_id, config.eos_id, config.decoder_start_id}
    sources = [[int(i) for i in rng.integers(4, 29, n) if i not in specials] for n in (3, 9, 1)]
    targets = [[int(i) for i in rng.integers(4, 29, n) if i not in specials] for n in (5, 2, 7)]
    results = translator.score_batch([[source_tokens[i] for i in s] for s in sources],
                                     [[target_tokens[i] for i in t] for t in targets])
    for result, expected in zip(results, keras_log_probs(model, sources, targets)):
        np.testing.assert_allclose(result.log_probs, expected, atol=1e-4)


# ------------------------------------------------------------- small run

@pytest.fixture
def reference(small_run):
    model = keras.models.load_model(small_run / "model.keras", safe_mode=True)
    return model, Tokenizer(str(small_run / "tokenizer.model"))


@pytest.mark.slow
def test_small_run_float32_export_is_exact(small_ct2, reference):
    output, report = small_ct2
    assert sorted(os.listdir(output)) == ["ctranslate2", "export.json", "tokenizer.model"]
    assert report["quantization"] == "float32"
    checked = report["formats"]["ctranslate2"]
    assert checked["max_log_prob_difference"] < 1e-4 and checked["greedy_agreement"] == 1.0
    model, tokenizer = reference
    translator = CTranslate2Translator(output / "ctranslate2")
    sources = [tokenizer.vocabulary.encode(s) for s in SENTENCES[1:4]]
    targets = [tokenizer.vocabulary.encode(s) for s in ("Haus", "der Baum ist klein.", "")]
    assert_exact(model, translator, sources, targets)
    # Its outputs do not end before the length limit (the model is
    # untrained): there, beam search with alpha 0 still agrees.
    found = translator.search(sources, beam_size=4, alpha=0.0)
    assert [f[0][0] for f in found] == [ids for ids, _ in keras_search(model, sources, beam_size=4,
                                                                      alpha=0.0)]


def test_folder_is_self_contained_and_states_its_decoding(small_ct2):
    folder = small_ct2[0] / "ctranslate2"
    assert {"model.bin", "config.json", "shared_vocabulary.json", "decoding.json",
            "tokenizer.model"} <= set(os.listdir(folder))
    config = json.loads((folder / "config.json").read_text())
    assert (config["decoder_start_token"], config["eos_token"], config["unk_token"]) == (
        "<s>", "</s>", "<unk>")
    assert config["add_source_eos"] and config["layer_norm_epsilon"] == 1e-6
    decoding = json.loads((folder / "decoding.json").read_text())
    assert decoding["suppress_sequences"] == [["<pad>"], ["<s>"]]
    assert (decoding["beam_size"], decoding["alpha"], decoding["length_penalty"],
            decoding["ctranslate2_length_penalty"]) == (4, 0.6, "gnmt", 0.3)


@pytest.mark.slow
def test_plain_ctranslate2_and_sentencepiece_translate_like_our_greedy_search(small_ct2, reference):
    """The README's recipe: no keras_transformer, only the folder's files."""
    import sentencepiece

    folder = str(small_ct2[0] / "ctranslate2")
    processor = sentencepiece.SentencePieceProcessor(model_file=os.path.join(folder,
                                                                             "tokenizer.model"))
    decoding = json.load(open(os.path.join(folder, "decoding.json")))
    results = ctranslate2.Translator(folder).translate_batch(
        [processor.encode(s, out_type=str) for s in SENTENCES[1:4]], beam_size=1,
        suppress_sequences=decoding["suppress_sequences"],
        max_decoding_length=decoding["max_length"] - 1)
    # (Its outputs run to the limit, where ours end with a forced end token.)
    model, tokenizer = reference
    expected = Translator(model, tokenizer, beam_size=1, decode_margin=100,
                          guard=False).translate(SENTENCES[1:4])
    assert [processor.decode(r.hypotheses[0]) for r in results] == expected


@pytest.mark.slow
def test_translator_in_a_fresh_process_needs_no_tensorflow(small_ct2, reference):
    output = subprocess.run(
        [sys.executable, "-c", CTRANSLATE2_ONLY_PROCESS, str(small_ct2[0] / "ctranslate2"),
         json.dumps(SENTENCES)],
        capture_output=True, text=True, check=True, env=processes.environment(), timeout=300)
    result = json.loads(output.stdout.strip().splitlines()[-1])
    assert result["loaded"] == []
    expected = Translator(*reference, beam_size=1, guard=False).translate(SENTENCES)
    assert result["translations"] == expected and expected[0] == "" and len(set(expected)) > 2


@pytest.mark.slow
def test_int8_command_loads_and_translates(small_run, small_ct2, tmp_path):
    output = tmp_path / "int8"
    status, _, lines = command("export/export_model.py", small_run, "--output", output,
                               "--formats", "ctranslate2", "--quantization", "int8")
    assert status == 0, lines
    report = json.loads((output / "export.json").read_text())
    checked = report["formats"]["ctranslate2"]
    assert report["quantization"] == checked["quantization"] == "int8"
    assert 0 <= checked["greedy_agreement"] <= 1 and checked["max_log_prob_difference"] > 0
    float32 = small_ct2[0] / "ctranslate2" / "model.bin"
    assert (output / "ctranslate2" / "model.bin").stat().st_size < 0.6 * float32.stat().st_size
    translations = CTranslate2Translator(output / "ctranslate2").translate(SENTENCES)
    assert len(translations) == len(SENTENCES) and translations[0] == "" and all(translations[1:])


# -------------------------------------------------------- imported models

IMPORTED = {
    "marian-shared-swish": lambda models: models.marian(),
    "marian-separate-relu": lambda models: models.marian(separate_vocabs=True, activation="relu"),
    "fsmt": lambda models: models.fsmt(),
}


@pytest.fixture(scope="module", params=IMPORTED.keys())
def imported_export(request, hf_models, tmp_path_factory):
    """An imported model's run folder (written by `save_run`), exported by `export_run`."""
    source, _, _ = IMPORTED[request.param](hf_models)
    folder = tmp_path_factory.mktemp(request.param)
    imported_model, tokenizer = from_preset(str(source))
    # A margin of 10 rather than 50 keeps the searches short.
    model = transformer(imported_model.config.replace(decode_margin=10),
                        imported_model.source_vocab_size, imported_model.target_vocab_size)
    model.set_weights(imported_model.get_weights())
    run = save_run(model, tokenizer, str(folder / "run"))
    report = export_run(run, str(folder / "export"), formats=["ctranslate2"])
    return request.param, run, folder / "export" / "ctranslate2", report


@pytest.fixture
def imported(imported_export):
    """The export, with the imported model and its tokenizer made after
    this test's seeding (which clears TF Text's SentencePiece resources)."""
    name, run, folder, report = imported_export
    model, tokenizer = run_folder.load_model(run), run_folder.load_tokenizer(run)
    return name, model, tokenizer, folder, report


@pytest.mark.slow
def test_imported_models_export_exactly(imported):
    name, model, tokenizer, folder, report = imported
    assert report["formats"]["ctranslate2"]["greedy_agreement"] == 1.0
    translator = CTranslate2Translator(folder)
    sources = [tokenizer.vocabulary.encode(s) for s in GERMAN]
    targets = [tokenizer.vocabulary.encode_target(s) for s in ENGLISH]
    assert_exact(model, translator, sources, targets)
    decoding = json.loads((folder / "decoding.json").read_text())
    config = json.loads((folder / "config.json").read_text())
    # Marian starts from its padding token, fairseq from its end token;
    # padding is never an output, nor a start token that is not the end.
    assert decoding["suppress_sequences"] == [["<pad>"]]
    assert config["decoder_start_token"] == ("</s>" if name == "fsmt" else "<pad>")
    # Text in, text out: the tokenizer's plain-Python twin around the search.
    expected = [tokenizer.vocabulary.decode(ids)
                for ids, _ in keras_search(model, sources, decode_margin=5)]
    assert translator.translate(GERMAN, beam_size=1, decode_margin=5) == expected


@pytest.mark.slow
@pytest.mark.parametrize("alpha", [0.0, 0.6])
def test_beam_search_agrees_with_ours(imported, alpha):
    """Trained models, whose outputs end: CTranslate2's beam (4) ranked
    with GNMT's penalty is our beam search, token for token. Scores agree
    to 0.1%: CTranslate2 bans padding before its softmax, we after ours."""
    name, model, tokenizer, folder, _ = imported
    translator = CTranslate2Translator(folder)
    sources = [tokenizer.vocabulary.encode(s) for s in GERMAN]
    found = [f[0] for f in translator.search(sources, beam_size=4, alpha=alpha)]
    expected = keras_search(model, sources, beam_size=4, alpha=alpha)
    assert [ids for ids, _ in found] == [ids for ids, _ in expected]
    np.testing.assert_allclose([s for _, s in found], [s for _, s in expected], rtol=1e-3)


# -------------------------------------------------------------- bad input

def test_bad_input_gives_one_line_errors_before_any_work(small_run, tmp_path, monkeypatch):
    with pytest.raises(ValueError, match="Unknown quantization 'int16'"):
        export_run(str(small_run), str(tmp_path / "out"), formats=["ctranslate2"],
                   quantization="int16")
    status, _, lines = command("export/export_model.py", small_run, "--output", tmp_path / "out",
                               "--quantization", "int16")
    assert status == 2 and "invalid choice: 'int16'" in lines[-1]
    monkeypatch.setitem(sys.modules, "ctranslate2", None)  # as if not installed
    with pytest.raises(ImportError, match=r"CTranslate2 is not installed: pip install"):
        export_run(str(small_run), str(tmp_path / "out"), formats=["ctranslate2"])
    monkeypatch.undo()
    elu = tmp_path / "elu"
    elu.mkdir()
    (elu / "tokenizer.model").write_bytes((small_run / "tokenizer.model").read_bytes())
    model = keras.models.load_model(small_run / "model.keras", safe_mode=True)
    transformer(model.config.replace(activation="elu"), 60).save(elu / "model.keras")
    with pytest.raises(ValueError, match="CTranslate2 has no 'elu' activation"):
        export_run(str(elu), str(tmp_path / "out"), formats=["ctranslate2"])
    assert not (tmp_path / "out").exists()
    with pytest.raises(FileNotFoundError, match="holds no model.bin"):
        CTranslate2Translator(tmp_path)
