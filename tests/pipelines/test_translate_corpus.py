"""Bulk translation on Apache Beam: every input line translated exactly as
translate.py's Translator does, with either runtime, in one or two worker
processes; a killed run leaves nothing, and the rerun is whole."""

import gzip
import os
import signal
import subprocess
import sys
import time
import warnings

import numpy as np
import pytest

from helpers import processes
from helpers.small_run import WORDS
from keras_transformer import data, run_folder
from keras_transformer.decoding import Translator
from keras_transformer.runtimes.ctranslate2_runner import CTranslate2Translator
from keras_transformer.pipelines.export_handler import ExportModelHandler, batch_seed
from keras_transformer.runtimes import Decoding, split_by_tokens
from keras_transformer.pipelines.runner import pipeline_options
from keras_transformer.pipelines.translate_corpus import Line, read_translations, translate_corpus
from keras_transformer.textfiles import TruncationWarning, read_lines



TWO_WORKERS = ["--direct_running_mode=multi_processing", "--direct_num_workers=2"]


@pytest.fixture(scope="module")
def inputs(tmp_path_factory):
    """Three files, one gzipped, one damaged; some lines longer than the model takes."""
    folder = tmp_path_factory.mktemp("mono")
    rng = np.random.default_rng(5)
    sentences = [" ".join(rng.choice(WORDS, size=rng.integers(1, 16))) + "." for _ in range(90)]
    (folder / "a.txt").write_text("\n".join(sentences[:60]) + "\n", encoding="utf-8")
    (folder / "b.txt").write_bytes(b"\xef\xbb\xbfDas Haus ist gro\xdf.\r\n\n  \nder Baum\x00 und das Haus")
    with gzip.open(folder / "c.txt.gz", "wb") as file:
        file.write(("\n".join(sentences[60:]) + "\n").encode("utf-8"))
    lines = {str(folder / "a.txt"): sentences[:60], str(folder / "c.txt.gz"): sentences[60:],
             str(folder / "b.txt"): read_lines(folder / "b.txt").lines}
    return folder, lines


def _expected(translator, lines):
    """What translate writes for each line: its sentences translated and
    joined back, a blank line empty (`Translator.translate_documents`)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", TruncationWarning)
        return {(path, number): translation for path, file_lines in lines.items()
                for number, translation in enumerate(translator.translate_documents(
                    [line if line.strip() else "" for line in file_lines]), start=1)}


@pytest.mark.slow
def test_killed_run_leaves_nothing_and_the_rerun_equals_translate_py(small_export, small_run,
                                                                      inputs, tmp_path):
    folder, lines = inputs
    output = tmp_path / "bt"
    killed = subprocess.Popen(
        [sys.executable, os.path.join(processes.ROOT, "examples", "translate_corpus.py"),
         str(small_export), "--input", str(folder / "*"), "--output", str(output),
         "--parallel-corpus"], env=processes.environment(), stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 120
    while not any(name.startswith(".partial-") for name in os.listdir(tmp_path)):
        assert killed.poll() is None and time.monotonic() < deadline
        time.sleep(0.05)
    time.sleep(2)
    killed.send_signal(signal.SIGKILL)
    killed.wait()
    assert not output.exists()

    manifest = translate_corpus(small_export, str(folder / "*"), output, parallel_corpus=True)
    # The SavedModel searches without the Translator's guard.
    translator = Translator.from_directory(str(small_run), guard=False)
    expected = _expected(translator, lines)
    assert read_translations(output) == expected
    # What was repaired or cut is named by file and line, as translate.py names it.
    b, a = manifest["inputs"][str(folder / "b.txt")], manifest["inputs"][str(folder / "a.txt")]
    assert (b["lines"], b["replaced"], b["nul"], b["overlong"]) == (4, [1], [4], [])
    too_long = translator.too_long(lines[str(folder / "a.txt")])
    assert too_long and a["overlong"] == [i + 1 for i in too_long] and a["lines"] == 60
    # The parallel corpus: translation TAB source for every non-blank line,
    # read by training as a local corpus.
    corpus_lines = (output / "corpus" / "train.tsv").read_text(encoding="utf-8").splitlines()
    sources = {key: text for path, file_lines in lines.items()
               for key, text in zip(((path, n) for n in range(1, len(file_lines) + 1)), file_lines)}
    assert sorted(corpus_lines) == sorted(f"{expected[key]}\t{source}" for key, source in sources.items()
                                          if source.strip())
    (output / "corpus" / "validation.tsv").write_text("Haus\thouse\n", encoding="utf-8")
    pairs = list(data.corpus(str(output / "corpus")).pairs("train").as_numpy_iterator())
    assert len(pairs) == len(corpus_lines) == 60 + 30 + 2


@pytest.mark.slow
def test_two_worker_processes_with_ctranslate2_translate_as_its_translator(small_ct2, small_run,
                                                                         inputs, tmp_path):
    folder, lines = inputs
    output = tmp_path / "ct2"
    translate_corpus(small_ct2[0], str(folder / "*.txt*"), output, runtime="ctranslate2",
                     decoding=Decoding(beam_size=1), batch_size=8, batch_tokens=96, shards=2,
                     beam_args=TWO_WORKERS)
    assert sorted(os.listdir(output)) == ["translate_corpus.json", "translations-00000-of-00002.jsonl",
                                          "translations-00001-of-00002.jsonl"]
    got = read_translations(output)
    ctranslate2 = CTranslate2Translator(str(small_ct2[0] / "ctranslate2"))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", TruncationWarning)
        assert got == {(path, n): t for path, file_lines in lines.items() for n, t in
                       enumerate(ctranslate2.translate(file_lines, beam_size=1), start=1)}
    # Greedy search gives our own search's tokens.
    assert got == _expected(Translator.from_directory(str(small_run), beam_size=1, guard=False),
                            lines)


def test_a_run_folder_is_translated_by_its_translator(small_run, inputs, tmp_path):
    """The keras runtime, the default for a run folder (no export needed):
    the Translator's translations (its guard included), and each line's
    confidence and flags as `translate --format jsonl` gives them."""
    import json
    import shutil

    from keras_transformer import trust
    from keras_transformer.decoding import quality

    folder, lines = inputs
    run = tmp_path / "calibrated"
    shutil.copytree(small_run, run)
    translator = Translator.from_directory(str(run), beam_size=2)
    count = len(quality.SIGNALS)
    trust.Calibrator(quality.SIGNALS, np.zeros(count), np.ones(count),
                     np.linspace(-1, 1, count), 30.0, 0.1, -3.0,
                     quality.model_digest(translator.model), translator.alpha).save(run)
    manifest = translate_corpus(run, str(folder / "a.txt"), tmp_path / "run",
                                decoding=Decoding(beam_size=2))
    assert manifest["runtime"] == "keras"
    translator = Translator.from_directory(str(run), beam_size=2)
    only_a = {path: text for path, text in lines.items() if path.endswith("a.txt")}
    expected = _expected(translator, only_a)
    assert read_translations(tmp_path / "run") == expected
    records = [json.loads(line) for path in (tmp_path / "run").glob("translations*.jsonl")
               for line in path.read_text(encoding="utf-8").splitlines()]
    for record in records:
        assert set(record) == {"file", "line", "translation", "confidence", "flags"}
    # Lines of one sentence: what the Translator assesses.
    sources = only_a[str(folder / "a.txt")]
    single = [r for r in records if trust.words_of(sources[r["line"] - 1])[-1:] == ["."]
              and sources[r["line"] - 1].count(".") == 1][:5]
    assessed = translator.assess([sources[r["line"] - 1] for r in single],
                                 [r["translation"] for r in single])
    assert [r["confidence"] for r in single] == [round(q.confidence, 3) for q in assessed]


def test_a_glossary_is_obeyed_as_the_translator_obeys_it(small_run, inputs, tmp_path):
    from keras_transformer.glossary import Glossary

    folder, lines = inputs
    terms = tmp_path / "terms.tsv"
    terms.write_text("Haus\tBaum\nklein\toder dort\n", encoding="utf-8")
    translate_corpus(small_run, str(folder / "a.txt"), tmp_path / "run", glossary=str(terms))
    glossary = Glossary.read(str(terms), "de")
    translator = Translator.from_directory(str(small_run))
    only_a = {path: text for path, text in lines.items() if path.endswith("a.txt")}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        expected = {(path, number): translation for path, file_lines in only_a.items()
                    for number, translation in enumerate(translator.translate_documents(
                        file_lines, glossary=glossary), start=1)}
    assert read_translations(tmp_path / "run") == expected
    assert expected != _expected(translator, only_a)  # the glossary changed some


def test_bad_input_stops_before_any_work(small_export, inputs, tmp_path):
    folder, _ = inputs
    utf16 = tmp_path / "utf16"
    utf16.mkdir()
    (utf16 / "x.txt").write_bytes("Haus\n".encode("utf-16"))
    attempts = [
        ((small_export, str(tmp_path / "none*.txt"), tmp_path / "o"), {}, ValueError,
         "No file matches"),
        ((small_export, str(utf16 / "*"), tmp_path / "o"), {}, ValueError, "is UTF-16 text"),
        ((small_export, str(folder / "*"), tmp_path / "o"), {"runtime": "ctranslate2"}, ValueError,
         "has no ctranslate2; export it again with --formats ctranslate2"),
        ((tmp_path, str(folder / "*"), tmp_path / "o"), {}, ValueError,
         "is neither a run folder .* nor an export"),
        ((small_export, str(folder / "*"), tmp_path / "o"),
         {"runtime": "onnx", "decoding": Decoding(sampling_topk=0)}, ValueError,
         "The onnx runtime does not sample"),
        ((small_export, str(folder / "*"), folder), {}, FileExistsError, "pass --overwrite"),
        ((small_export, str(folder / "*"), tmp_path / "o"), {"beam_args": ["--shard", "4"]},
         ValueError, "unrecognized arguments: --shard 4 .neither"),
        ((small_export, str(folder / "*"), tmp_path / "o"),
         {"glossary": str(folder / "a.txt")}, ValueError,
         "--glossary is obeyed by the keras runtime's search; the saved_model runtime"),
        ((small_export, str(folder / "*"), tmp_path / "o"),
         {"glossary": str(tmp_path / "none.tsv")}, ValueError, "Cannot read the glossary"),
    ]
    for args, kwargs, error, message in attempts:
        with pytest.raises(error, match=message):
            translate_corpus(*args, **kwargs)
    assert sorted(os.listdir(tmp_path)) == ["utf16"]
    # Values of Beam's own options are not mistaken for stray words.
    assert pipeline_options(["--runner", "FnApiRunner", "--direct_num_workers=2"])


@pytest.mark.slow
def test_sampled_batches_are_reproducible_for_a_seed_and_their_lines(small_export):
    """RunInference's sampling: a batch draws with a seed made of the run's
    seed and its lines, so the same batch gives the same translations, the
    same sentence in another line of a batch draws anew, and the draws are
    the SavedModel's `sample` signature's with that seed."""
    import tensorflow as tf

    sentences = ["der Baum und das Haus", "Das Haus ist groß.", "klein", ""]
    batch = [Line(0, number, text, 8) for number, text in enumerate(sentences * 4, start=1)]
    # One search a batch here, each line one input, so that the draws are
    # one `sample` call's.
    handler = ExportModelHandler(small_export, in_flight=1, split=False, decoding=Decoding(
        sampling_topk=0, sampling_temperature=3.0, seed=4))
    model = handler.load_model()
    translate = lambda lines: [r.inference[0]  # noqa: E731
                               for r in handler.run_inference(lines, model)]
    first = translate(batch)
    assert translate(batch) == first
    assert len(set(first[0::4])) > 1 and first[3::4] == [""] * 4  # each line its own draw
    moved = [line._replace(number=line.number + 100) for line in batch]
    assert translate(moved) != first
    other = ExportModelHandler(small_export, in_flight=1, split=False, decoding=Decoding(
        sampling_topk=0, sampling_temperature=3.0, seed=5))
    assert [r.inference[0] for r in other.run_inference(batch, model)] != first
    outputs = model.model.signatures["sample"](
        text=tf.constant([s.encode("utf-8") for s in sentences * 4]), top_k=tf.constant(0),
        temperature=tf.constant(3.0), seed=tf.constant(batch_seed(4, batch)),
        decode_margin=tf.constant(handler.decoding.decode_margin))
    assert [t.decode("utf-8") for t in outputs["translations"].numpy()] == first


@pytest.mark.slow
def test_a_batch_in_two_searches_at_once_translates_as_one_search(small_export, small_run):
    """The SavedModel runtime cuts a batch into searches of about equal
    tokens run at once on threads: the same translations as one search of
    the whole batch, and as the Translator's, in the batch's order."""
    rng = np.random.default_rng(3)
    texts = [" ".join(rng.choice(WORDS, size=rng.integers(1, 9))) for _ in range(40)] + [""]
    tokenizer = run_folder.load_tokenizer(str(small_run))
    lengths = tokenizer.tokenize(texts).row_lengths().numpy().tolist()
    batch = sorted((Line(0, number, text, length) for number, (text, length)
                    in enumerate(zip(texts, lengths), start=1)), key=lambda line: line.tokens)
    translations = {}
    for in_flight in (1, 2, 3):
        handler = ExportModelHandler(small_export, in_flight=in_flight)
        results = handler.run_inference(batch, handler.load_model())
        assert [result.example for result in results] == batch
        translations[in_flight] = [result.inference[0] for result in results]
    assert translations[2] == translations[1] == translations[3]
    expected = Translator.from_directory(str(small_run), guard=False).translate(
        [line.text for line in batch])
    assert translations[1] == expected
    with pytest.raises(ValueError, match="in_flight must be at least 1; got 0"):
        ExportModelHandler(small_export, in_flight=0)


@pytest.mark.parametrize("tokens", [[5] * 8, [1, 1, 1, 30], [0], [4, 9, 2, 7, 7, 3, 11]])
@pytest.mark.parametrize("parts", [1, 2, 3])
def test_split_by_tokens_keeps_the_lines_in_order_in_balanced_runs(tokens, parts):
    runs = split_by_tokens(tokens, parts)
    assert [index for run in runs for index in run] == list(range(len(tokens)))
    assert 1 <= len(runs) <= parts and all(runs)
    total, largest = sum(t + 1 for t in tokens), max(tokens) + 1
    # Each run ends at the first line that takes it to its share or beyond.
    assert all(sum(tokens[i] + 1 for i in run) < total / parts + largest for run in runs)
