"""LiteRT export: translate.tflite and search_ids.tflite translate and search
as the SavedModel's functions do, run by LiteRT's interpreter in processes
that load nothing of this package; text in for unigram SentencePiece and
OPUS-MT models, token ids in (and one line saying why) for BPE; the litert
runtime translates, serves and translates a corpus; what LiteRT cannot
hold is refused in one line before anything is written."""

import json
import os
import subprocess
import sys
import warnings

import numpy as np
import pytest
import tensorflow as tf

from helpers import processes
from helpers.small_run import CONFIG, WORDS, write_small_run
from keras_transformer import runtimes
from keras_transformer import run_folder
from keras_transformer.data import Tokenizer, encode_sources
from keras_transformer.decoding import Translator
from keras_transformer.decoding.translator import search
from keras_transformer.export import export_run, litert_model, saved_model
from keras_transformer.runtimes import translate_litert
from keras_transformer.models import transformer
from keras_transformer.pretrained import from_preset, save_run

pytestmark = pytest.mark.filterwarnings("ignore::keras_transformer.textfiles.TruncationWarning")
# Different lengths, a blank line, and a line longer than the model's 23 tokens.
SENTENCES = ["der Baum und das Haus", "", "Haus", "Hier war ein Haus nicht klein.",
             " ".join(["Haus Baum groß"] * 12), "die", "das Haus ist groß und der Baum ist klein"]
MARIAN_SENTENCES = ["Der Hund sieht einen roten Apfel.", ">>fra<< Der König liest", "",
                    "  Mein Bruder braucht 3 Flaschen Wasser.  ", ">>deu<<Die Katze"]


@pytest.fixture(autouse=True)
def _seed():
    """Not reseeded between tests (conftest's `_seed`): reseeding drops the
    SentencePiece resources of the tokenizers the module's fixtures made."""


def _export(run, folder, **options):
    """`export_run` to LiteRT; returns the export folder, its report and
    the warnings it gave."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        report = export_run(str(run), str(folder), formats=["litert"], **options)
    return folder, report["formats"]["litert"], [str(w.message) for w in caught
                                                 if "litert/" in str(w.message)]


@pytest.fixture(scope="module")
def unigram_run(tmp_path_factory):
    """A small run with a unigram tokenizer and greedy search (beam 1)."""
    folder = tmp_path_factory.mktemp("unigram") / "run"
    folder.mkdir()
    return write_small_run(folder, tokenizer_type="unigram", config=CONFIG.replace(beam_size=1))


@pytest.fixture(scope="module")
def unigram(unigram_run):
    """`unigram_run` exported to LiteRT: the run, the export, its report,
    the export's warnings."""
    return (unigram_run, *_export(unigram_run, unigram_run.parent / "export"))


@pytest.fixture(scope="module")
def bpe(small_run, tmp_path_factory):
    """`small_run` (BPE tokenizer, beam 4) exported to LiteRT, int8."""
    return (small_run, *_export(small_run, tmp_path_factory.mktemp("bpe") / "export",
                                quantization="int8"))


def _fresh(*runs):
    """`translate_litert.py --json` on `(file, input)` runs, in a process of
    its own: its results, and what it loaded."""
    request = {"runs": [{"model": str(path)} | data for path, data in runs]}
    done = subprocess.run([sys.executable, translate_litert.__file__, "--json"], input=json.dumps(request),
                          capture_output=True, text=True, check=True, timeout=300)
    output = json.loads(done.stdout)
    return output["results"], output["loaded"]


def _saved_model(run, sentences):
    """The text SavedModel's `translate` function (in this process) on one
    batch: n-best translations and scores, with the model's settings."""
    model, tokenizer = run_folder.load_model(str(run)), run_folder.load_tokenizer(str(run))
    config = model.config
    output = saved_model.ServingModule(model, tokenizer).translate(
        tf.constant(sentences), tf.constant(config.beam_size),
        tf.constant(float(config.length_penalty)), tf.constant(config.decode_margin))
    return ([[text.decode() for text in row] for row in output["translations"].numpy()],
            output["scores"].numpy())


@pytest.mark.slow
def test_a_unigram_run_exports_text_in_and_translates_as_its_saved_model(unigram):
    run, export, report, messages = unigram
    assert report["text_in"] and not messages and report["beam_size"] == 1
    assert report["float32"]["custom_ops"] == sorted(litert_model.SENTENCEPIECE_OPS)
    assert report["float32"]["max_score_difference"] < 1e-4
    assert json.loads((export / "export.json").read_text())["formats"]["litert"] == report
    (translated, search_ids), loaded = _fresh(
        (export / "litert" / "translate.tflite", {"sentences": SENTENCES}),
        (export / "litert" / "search_ids.tflite", {"source_ids": [[5, 9, 3], [3, 0, 0]]}))
    # tf-text's kernels load TensorFlow's framework library, not its Python package.
    assert loaded == []
    expected, scores = _saved_model(run, SENTENCES)
    assert translated["translations"] == expected and expected[1] == [""]
    assert len({row[0] for row in expected}) > 2  # varied translations, not all alike
    np.testing.assert_allclose(translated["scores"], scores, atol=1e-4)
    model = run_folder.load_model(str(run))
    assert search_ids["target_ids"] == search(model, tf.constant([[5, 9, 3], [3, 0, 0]]), 1, 0.6,
                                              CONFIG.decode_margin).tokens.numpy().tolist()
    # The file's own command line, as a user runs it.
    printed = subprocess.run([sys.executable, translate_litert.__file__,
                              str(export / "litert" / "translate.tflite"), *SENTENCES[:3]],
                             capture_output=True, text=True, check=True, timeout=300).stdout
    assert printed.split("\n")[:3] == [row[0] for row in expected[:3]]


@pytest.mark.slow
def test_a_bpe_run_gets_a_file_that_takes_ids_and_one_line_saying_why(bpe):
    run, export, report, messages = bpe
    assert not report["text_in"] and report["beam_size"] == 4
    assert messages == [f"litert/translate.tflite takes token ids: {report['text_in_refusal']}."]
    assert "BPE" in messages[0] and "--tokenizer-type unigram" in messages[0]
    assert "\n" not in messages[0]
    # The float32 files passed the exporter's checks (the SavedModel's n-best
    # translations of its check sentences' ids, TensorFlow's search); the
    # int8 ones replaced them, their agreement measured.
    assert report["float32"]["max_score_difference"] < 1e-4
    assert report["float32"]["custom_ops"] == ["TFText>FastSentencepieceDetokenize"]
    assert litert_model.custom_ops((export / "litert" / "search_ids.tflite").read_bytes()) == []
    for name, size in report["int8"]["sizes"].items():
        assert size < 0.8 * report["float32"]["sizes"][name]
        assert (export / "litert" / name).stat().st_size == size
    model, tokenizer = run_folder.load_model(str(run)), run_folder.load_tokenizer(str(run))
    source, _ = encode_sources(tokenizer, tf.constant(SENTENCES), model.config.max_source_tokens)
    (translated, searched), _ = _fresh(
        (export / "litert" / "translate.tflite", {"source_ids": source.numpy().tolist()}),
        (export / "litert" / "search_ids.tflite", {"source_ids": source.numpy().tolist()}))
    assert [len(row) for row in translated["translations"]] == [4] * len(SENTENCES)
    assert translated["translations"][1] == [""] * 4 and translated["scores"][1] == [0.0] * 4
    assert all(max(row) < 0 for i, row in enumerate(translated["scores"]) if i != 1)
    assert np.array(searched["target_ids"]).shape[:2] == (len(SENTENCES), 4)
    # The file's command line: each line's best target ids; a line that is
    # not ids gets one line of error.
    lines = [" ".join(str(i) for i in row if i) for row in source.numpy().tolist()[:3]]
    search_file = str(export / "litert" / "search_ids.tflite")
    printed = subprocess.run([sys.executable, translate_litert.__file__, search_file],
                             input="\n".join(lines) + "\n", capture_output=True, text=True,
                             check=True, timeout=300).stdout
    assert printed.splitlines() == [" ".join(str(i) for i in row[0] if i)
                                    for row in searched["target_ids"][:3]]
    refused = subprocess.run([sys.executable, translate_litert.__file__, search_file, "Guten Morgen"],
                             capture_output=True, text=True, timeout=300)
    assert refused.returncode == 2 and "Traceback" not in refused.stderr
    assert refused.stderr.strip().splitlines()[-1].endswith(
        "takes token ids: give lines of space-separated integers")


@pytest.mark.slow
def test_an_imported_marian_model_exports_text_in(hf_models, tmp_path):
    folder, _, _ = hf_models.marian(language_codes=True)
    imported, tokenizer = from_preset(str(folder))
    # A margin of 10 rather than 50 keeps the searches short.
    model = transformer(imported.config.replace(decode_margin=10), imported.source_vocab_size,
                        imported.target_vocab_size)
    model.set_weights(imported.get_weights())
    run = save_run(model, tokenizer, str(tmp_path / "run"))
    export, report, messages = _export(run, tmp_path / "export")
    assert report["text_in"] and not messages and report["beam_size"] == 4
    assert report["float32"]["custom_ops"] == sorted(litert_model.SENTENCEPIECE_OPS
                                                     + litert_model.BYTE_OPS)
    # The exporter compared the file's n-best translations of its check
    # sentences (one with a language code) with the SavedModel's; the text
    # steps are compared with Hugging Face's below.
    assert report["float32"]["max_score_difference"] < 1e-4
    (found,), _ = _fresh((export / "litert" / "translate.tflite", {"sentences": MARIAN_SENTENCES}))
    assert [len(row) for row in found["translations"]] == [4] * len(MARIAN_SENTENCES)
    assert found["translations"][2] == [""] * 4
    best = [row[0] for row in found["translations"]]
    assert all(best[i] for i in (0, 1, 3, 4)) and len(set(best)) == 5


@pytest.mark.slow
def test_the_tflite_text_steps_give_the_tokenizers_ids_and_texts(small_run, unigram_run,
                                                                 hf_models):
    """tf-text's LiteRT SentencePiece kernels share their encoder and decoder
    with its TensorFlow ops, which run the text steps of the files here on
    random ids: the texts are `Tokenizer.detokenize`'s (sentencepiece's),
    and for OPUS-MT the ids and texts `MarianVocabulary`'s (Hugging Face's)."""
    rng = np.random.default_rng(3)
    for run in (small_run, unigram_run):
        tokenizer = Tokenizer(str(run / "tokenizer.model"))
        text = litert_model._SentencePieceText(tokenizer)
        rows = [[1] * int(rng.random() < 0.3) + [text.spaces[0]] * int(rng.integers(0, 3))
                + list(rng.integers(0, tokenizer.vocab_size, size=rng.integers(0, 7)))
                + [3] + list(rng.integers(0, tokenizer.vocab_size, size=2)) for _ in range(2000)]
        ids = _dense(rows, 0)
        keep = tf.cumsum(tf.cast(ids == 3, tf.int32), axis=1, exclusive=True) == 0
        assert text.detokenize(tf.constant(ids), keep).numpy().tolist() == \
            tokenizer.detokenize(tf.constant(ids)).numpy().tolist()
    sentences = [" ".join(rng.choice(["Der Hund", "sieht", "einen roten Apfel", "Wasser", "!"],
                                     size=rng.integers(1, 6))) for _ in range(200)]
    sentences += [">>fra<< Der König", ">>deu<<Hallo", ">>xyz<< a", ">><< b", ">>fra<<", "",
                  ">> fra << x", "Der >>fra<<", ">>fra<<>>deu<< x", ">>fr<a<< ok", "  "]
    # With and without language codes (most OPUS-MT models have none), and
    # batches of short texts alone (narrower than a code's bytes).
    for language_codes in (True, False):
        folder, _, _ = hf_models.marian(language_codes=language_codes)
        tokenizer = run_folder.load_tokenizer(str(folder))
        vocabulary, text = tokenizer.vocabulary, litert_model._MarianText(tokenizer)
        for batch in (sentences, [""], ["Ja"], ["!", ""]):
            values, splits, heads = text.tokenize(tf.constant(batch))
            source, blank = litert_model._padded(values, splits, heads, 1000, {
                "pad": tokenizer.pad_id, "eos": tokenizer.eos_id})
            assert [[i for i in row if i != tokenizer.pad_id][:-1]
                    for row in source.numpy().tolist()] == [vocabulary.encode(s) for s in batch]
            assert blank.numpy().tolist() == [not vocabulary.encode(s) for s in batch]
    rows = [list(rng.integers(0, tokenizer.target_vocab_size, size=rng.integers(0, 8)))
            + [tokenizer.eos_id, 5] for _ in range(2000)]
    ids = _dense(rows, tokenizer.pad_id)
    keep = tf.cumsum(tf.cast(ids == tokenizer.eos_id, tf.int32), axis=1, exclusive=True) == 0
    assert [t.decode() for t in text.detokenize(tf.constant(ids), keep).numpy()] == \
        [vocabulary.decode(row) for row in rows]


def _dense(rows, pad_id):
    width = max(len(row) for row in rows)
    return np.array([row + [pad_id] * (width - len(row)) for row in rows], np.int32)


@pytest.mark.slow
def test_the_litert_runtime_translates_serves_and_translates_a_corpus(unigram, tmp_path):
    from starlette.testclient import TestClient

    from keras_transformer.pipelines.translate_corpus import read_translations, translate_corpus
    from keras_transformer.serving.app import ServedModel, Settings, create_app

    run, export = unigram[:2]
    rng = np.random.default_rng(11)
    sentences = [" ".join(rng.choice(WORDS, size=rng.integers(1, 12))) for _ in range(30)]
    sentences += ["", " ", SENTENCES[4]]
    translator = Translator.from_directory(str(run), guard=False)  # (LiteRT does not guard)
    expected = translator.translate(sentences, n_best=3)
    assert len({row[0][0] for row in expected}) > 5
    opened = runtimes.open_runtime(str(export), "litert")
    assert runtimes.default_runtime(str(export)) == "litert"
    found = runtimes.translate_sorted(opened, sentences, n_best=3, batch_tokens=64)
    assert [[t for t, _ in row] for row in found] == [[t for t, _ in row] for row in expected]
    np.testing.assert_allclose([[s for _, s in row] for row in found],
                               [[s for _, s in row] for row in expected], atol=1e-3)
    with TestClient(create_app(Settings([ServedModel(opened, "de", "en")]))) as client:
        answer = client.post("/translate", json={"q": sentences[:5], "source": "de",
                                                 "target": "en"}).json()
    assert answer == {"translatedText": [row[0][0] for row in expected[:5]]}
    (tmp_path / "in.txt").write_text("\n".join(sentences) + "\n", encoding="utf-8")
    manifest = translate_corpus(export, str(tmp_path / "in.txt"), tmp_path / "out",
                                runtime="litert")
    assert manifest["runtime"] == "litert"
    assert read_translations(tmp_path / "out") == {
        (str(tmp_path / "in.txt"), number): row[0][0]
        for number, row in enumerate(expected, start=1)}
    done = subprocess.run([sys.executable, os.path.join(processes.ROOT, "examples", "translate.py"),
                           str(export), "--runtime", "litert"], input="\n".join(sentences[:6]),
                          capture_output=True, text=True, env=processes.environment(),
                          timeout=300, check=True)
    assert done.stdout.splitlines() == [row[0][0] for row in expected[:6]]
    with pytest.raises(ValueError, match=r"searches as its files were exported \(beam size 1, "
                                         r"alpha 0.6, decode margin 6\); leave out --beam-size"):
        runtimes.open_runtime(str(export), "litert", runtimes.Decoding(beam_size=4))
    with pytest.raises(ValueError, match="The litert runtime does not sample"):
        runtimes.check_runtime(str(export), "litert", runtimes.Decoding(sampling_topk=0))


def test_what_litert_cannot_hold_is_refused_in_one_line_before_anything_is_written(
        hf_models, small_run, tmp_path):
    folder, _, _ = hf_models.fsmt()
    model, tokenizer = from_preset(str(folder))
    run = save_run(model, tokenizer, str(tmp_path / "fsmt"))
    with pytest.raises(ValueError, match=r"^A FsmtTokenizer is not SentencePiece, which is the "
                                         r"only tokenizer LiteRT can hold; export this model "
                                         r"--formats onnx or ctranslate2\.$"):
        export_run(run, str(tmp_path / "out"), formats=["litert"])
    for formats in (["litert", "onnx"], ["keras", "saved_model"]):
        with pytest.raises(ValueError, match="float16 weights are for the litert format only"):
            export_run(str(small_run), str(tmp_path / "out"), formats=formats,
                       quantization="float16")
    assert not os.path.exists(tmp_path / "out")
    assert not [name for name in os.listdir(tmp_path) if name.startswith(".export-")]

    # An op the converter cannot lower to a builtin arrives as a custom op
    # of its TensorFlow name: the file is refused.
    module = tf.Module()
    module.f = tf.function(lambda text: {"out": tf.strings.regex_replace(text, "a", "b")},
                           input_signature=[tf.TensorSpec([None], tf.string)])
    converter = tf.lite.TFLiteConverter.from_concrete_functions(
        [module.f.get_concrete_function()], module)
    converter.allow_custom_ops = True
    with pytest.raises(ValueError, match=r"^LiteRT has no builtin op for TensorFlow's "
                                         r"StaticRegexReplace in this model, and Flex"):
        litert_model.check_ops(converter.convert())


def test_train_takes_the_tokenizer_type_to_sentencepiece_and_records_it(tmp_path, capsys):
    from keras_transformer import data
    from keras_transformer.commands import train
    from keras_transformer.run_folder import RunOptions
    from keras_transformer.training.run import prepare_tokenizer

    (tmp_path / "corpus").mkdir()
    (tmp_path / "corpus" / "train.tsv").write_text(
        "".join(f"{' '.join(WORDS[i:i + 5])}\t{' '.join(WORDS[i + 1:i + 7])}\n"
                for i in range(len(WORDS) - 6)) * 20, encoding="utf-8")
    corpus = data.corpus(str(tmp_path / "corpus"))
    for kind in ("unigram", "bpe"):
        options = train.options_from(train.parse(
            ["--output", str(tmp_path / kind), "--dataset", str(tmp_path / "corpus"),
             "--vocab-size", "40"] + (["--tokenizer-type", kind] if kind == "unigram" else [])))
        os.makedirs(options.output_dir)
        assert options.tokenizer_type == kind  # run.json records the options as they are
        tokenizer = prepare_tokenizer(options, corpus, chief=True)
        assert tokenizer.model_type == kind == Tokenizer(
            str(tmp_path / kind / "tokenizer.model")).model_type
    assert RunOptions(output_dir="x").tokenizer_type == "bpe"
    for others, said in ((["--init-from", "runs/y"], "--init-from takes the model and tokenizer"),
                         (["--dataset", "prepared:shards"], "trains with the shards' tokenizer")):
        with pytest.raises(SystemExit):
            train.parse(["--output", "x", *others, "--tokenizer-type", "unigram"])
        assert said in capsys.readouterr().err
    from keras_transformer.commands import prepare_data

    with pytest.raises(SystemExit):  # a run's tokenizer is used as it is
        prepare_data.main(["--dataset", "ding", "--tokenizer", "runs/y", "--tokenizer-type",
                           "unigram", "--output", str(tmp_path / "shards"), "--shards", "1"])
    assert "--tokenizer-type is for a model trained with --vocab-size" in capsys.readouterr().err
    assert not os.path.exists(tmp_path / "shards")
