"""`keras_transformer.runtimes`: a run folder and an export's runtimes give
the Translator's translations (the best and the n best, scores falling);
a runtime that cannot read a folder says in one line what to run."""

import numpy as np
import pytest

from helpers.small_run import WORDS
from keras_transformer import runtimes
from keras_transformer.decoding import Translator


def _sentences():
    rng = np.random.default_rng(11)
    return [" ".join(rng.choice(WORDS, size=rng.integers(1, 9))) for _ in range(12)] + ["", " "]


@pytest.mark.slow
@pytest.mark.parametrize("runtime, folder", [
    ("keras", "run"), ("keras", "export"), ("saved_model", "export"), ("onnx", "export"),
    ("ctranslate2", "ct2")])
def test_every_runtime_gives_the_translators_n_best(small_run, small_export, small_ct2, runtime,
                                                    folder):
    path = {"run": small_run, "export": small_export, "ct2": small_ct2[0]}[folder]
    # The exports' engines run searches without the Translator's guard.
    opened = runtimes.open_runtime(str(path), runtime, runtimes.Decoding(guard=False), in_flight=2)
    assert opened.name == runtime and opened.decoding.beam_size == 4
    sentences = _sentences()
    expected = Translator.from_directory(str(small_run), guard=False).translate(sentences,
                                                                                n_best=3)
    found = opened.translate(sentences, n_best=3)
    for row, reference in zip(found, expected):
        assert len(row) == len(reference)
        assert [s for _, s in row] == sorted((s for _, s in row), reverse=True)
    # One translation a sentence: the n-best list's first. (The Translator's
    # search for it ends sentences sooner, so rows leave the batch at other
    # steps, which can move a score's last bits.)
    best = opened.translate(sentences, n_best=1)
    assert [[text for text, _ in row] for row in best] == [[row[0][0]] for row in found]
    np.testing.assert_allclose([row[0][1] for row in best], [row[0][1] for row in found],
                               rtol=1e-5)
    assert opened.source_lengths(["der Baum und das Haus", ""])[1] == 0
    if runtime == "ctranslate2":
        # CTranslate2's beam search keeps other hypotheses than ours (its
        # rules for finished ones are not fairseq's); its greedy search is ours.
        expected = Translator.from_directory(str(small_run), beam_size=1, guard=False).translate(
            sentences, n_best=1)
        found = runtimes.open_runtime(str(path), runtime, runtimes.Decoding(beam_size=1)).translate(
            sentences)
    assert [[text for text, _ in row] for row in found] == \
        [[text for text, _ in row] for row in expected]
    for row, reference in zip(found, expected):
        np.testing.assert_allclose([s for _, s in row], [s for _, s in reference], atol=1e-3)


def test_a_folder_is_read_by_the_runtimes_it_has_and_the_others_say_what_to_run(
        small_run, small_export, small_ct2, tmp_path):
    assert runtimes.default_runtime(str(small_run)) == "keras"
    assert runtimes.default_runtime(str(small_export)) == "saved_model"
    assert runtimes.default_runtime(str(small_ct2[0])) == "ctranslate2"
    refusals = [
        (small_run, "saved_model", {}, "is a run folder, which the keras runtime translates; the "
                                       "saved_model runtime reads an export: keras-transformer "
                                       "export"),
        (small_run, "ctranslate2", {}, "--formats ctranslate2, then give EXPORT"),
        (small_export, "ctranslate2", {}, "has no ctranslate2; export it again with --formats "
                                          "ctranslate2"),
        (small_ct2[0], "saved_model", {}, "has no saved_model; its tokenizer is not TensorFlow "
                                          "ops (FSMT): use --runtime ctranslate2, onnx or keras"),
        (small_export, "onnx", {"sampling_topk": 0}, "The onnx runtime does not sample"),
        (tmp_path, "keras", {}, "is neither a run folder"),
        (tmp_path / "missing", "keras", {}, "is not a folder; give a training run"),
        (small_run, "tflite", {}, "Unknown runtime 'tflite'"),
    ]
    for path, runtime, decoding, message in refusals:
        with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
            runtimes.check_runtime(str(path), runtime, runtimes.Decoding(**decoding))


@pytest.mark.slow
def test_the_onnx_runtime_searches_batches_on_the_step_graphs_and_old_exports_still_translate(
        small_export, tmp_path):
    """The onnx runtime searches batches and lone sentences over the graphs
    written from the weights (`onnx_step`), thread-safe: a lone request
    arriving while a batch is searched gets what it gets alone. An export
    made before those graphs is told in one line to export again, and
    translates as before (the NumPy search over tf2onnx's graphs), the same
    translations."""
    import shutil
    import threading

    from keras_transformer import onnx_step

    opened = runtimes.open_runtime(str(small_export), "onnx", runtimes.Decoding(guard=False))
    assert opened.lone == "onnxruntime" and opened.translator.steps is not None
    sentences = _sentences()
    expected = opened.translate(sentences, n_best=2)
    alone = opened.translate(sentences[:1])
    found = {}

    def batch():
        found["batch"] = opened.translate(sentences, n_best=2)

    searching = threading.Thread(target=batch)
    searching.start()
    found["lone"] = [opened.translate(sentences[:1])[0] for _ in range(5)]
    searching.join()
    assert found["batch"] == expected and found["lone"] == alone * 5

    old = tmp_path / "old"
    shutil.copytree(small_export / "onnx", old / "onnx")
    shutil.copy(small_export / "export.json", old)
    for name in onnx_step.FILES:
        (old / "onnx" / name).unlink()
    with pytest.warns(UserWarning, match=r"exported before the graphs that search batches and "
                                         r"lone sentences fast: export the run again\.$"):
        older = runtimes.open_runtime(str(old), "onnx", runtimes.Decoding(guard=False))
    assert older.lone is None
    found = older.translate(sentences, n_best=2)
    assert [[text for text, _ in row] for row in found] == \
        [[text for text, _ in row] for row in expected]
    np.testing.assert_allclose([s for row in found for _, s in row],
                               [s for row in expected for _, s in row], rtol=1e-5)
