"""Prepared training data (Apache Beam): the shards hold exactly the pairs
the on-the-fly pipeline makes, whether one or two worker processes wrote
them; training reads them in token-budget batches, per worker, and resumes
at its place in the data."""

import collections
import dataclasses
import functools
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
import tensorflow as tf

from helpers import processes
from helpers.small_run import CONFIG, WORDS
from keras_transformer import data, run_folder
from keras_transformer.data.prepared import PreparedCorpus
from keras_transformer.pipelines.prepare_data import prepare_data
from keras_transformer.run_folder import RunOptions
from keras_transformer.training.run import prepare_tokenizer, run_training



MAX_LENGTH = 16
TWO_WORKERS = ["--direct_running_mode=multi_processing", "--direct_num_workers=2"]


def write_corpus(folder, sizes=(600, 40, 30), seed=0):
    """A local corpus of word strings and their reversals, some longer than
    MAX_LENGTH tokens."""
    rng = np.random.default_rng(seed)
    folder.mkdir(parents=True)
    for split, count in zip(("train", "validation", "test"), sizes):
        lines = []
        for _ in range(count):
            words = list(rng.choice(WORDS, size=rng.integers(1, 12)))
            lines.append(" ".join(words) + ".\t" + " ".join(reversed(words)) + "!\n")
        (folder / f"{split}.tsv").write_text("".join(lines), encoding="utf-8")
    return folder


def _rows(encoded):
    return collections.Counter((tuple(s), tuple(l)) for s, _, l in encoded.as_numpy_iterator())


@pytest.fixture(scope="module")
def prepared(small_run, tmp_path_factory):
    """The corpus and its shards, written by two worker processes."""
    folder = tmp_path_factory.mktemp("prepared")
    source = write_corpus(folder / "corpus")
    info = prepare_data(data.corpus(str(source)), run_folder.load_tokenizer(small_run), folder / "shards",
                        shards=3, max_length=MAX_LENGTH, beam_args=TWO_WORKERS, parts=4)
    return source, folder / "shards", info


@pytest.mark.slow
def test_shards_hold_the_pairs_of_the_on_the_fly_pipeline(prepared, small_run):
    source, shards, info = prepared
    tokenizer = run_folder.load_tokenizer(small_run)
    corpus = data.corpus(str(source))
    on_the_fly = data.encode_pairs(corpus.pairs("train"), tokenizer)
    kept = data.length_filter(on_the_fly, MAX_LENGTH)
    ready = data.corpus(f"prepared:{shards}")
    assert isinstance(ready, PreparedCorpus) and len(ready.files) == 3
    assert _rows(ready.encoded(ready.files)) == _rows(kept)
    for source_ids, target_ids, labels in ready.encoded(ready.files).take(50).as_numpy_iterator():
        assert source_ids[-1] == labels[-1] == tokenizer.eos_id
        np.testing.assert_array_equal(target_ids, [tokenizer.bos_id, *labels[:-1]])
    # The counts are training's own report; some pairs were too long.
    assert info["train"] == dataclasses.asdict(data.length_report(on_the_fly, MAX_LENGTH))
    assert info["train"]["dropped"] > 0
    assert ready.length_report(MAX_LENGTH) == data.length_report(on_the_fly, MAX_LENGTH)
    # A shorter max_length drops what training on the raw corpus would.
    assert ready.length_report(10) == data.length_report(on_the_fly, 10)
    # Held-out text is copied in order; the tokenizer travels with the data.
    for split in ("validation", "test"):
        assert (list(ready.pairs(split).as_numpy_iterator())
                == list(corpus.pairs(split).as_numpy_iterator()))
    ready.check_tokenizer(ready.load_tokenizer(), "the data")
    ready.check_tokenizer(tokenizer, "the small run")


@pytest.mark.slow
def test_one_worker_in_process_writes_the_same_data(prepared, small_run, tmp_path):
    """Also with more shards than batches of pairs (two parts of 300 pairs
    make four): the shards left without a batch are written empty."""
    source, shards, info = prepared
    single = prepare_data(data.corpus(str(source)), run_folder.load_tokenizer(small_run), tmp_path / "one",
                          shards=6, max_length=MAX_LENGTH, parts=2)
    assert single["train"] == info["train"] and single["tokenizer"] == info["tokenizer"]
    one, two = PreparedCorpus(tmp_path / "one"), PreparedCorpus(shards)
    assert len(one.files) == 6 and single["files"] == [os.path.basename(f) for f in one.files]
    sizes = [sum(1 for _ in tf.data.TFRecordDataset(path)) for path in one.files]
    assert sizes.count(0) == 3 and sum(sizes) == info["train"]["kept"]
    assert _rows(one.encoded(one.files)) == _rows(two.encoded(two.files))
    with pytest.raises(FileExistsError, match="pass --overwrite"):
        prepare_data(data.corpus(str(source)), run_folder.load_tokenizer(small_run), tmp_path / "one",
                     shards=6, max_length=MAX_LENGTH)


def _lengths(encoded):
    return encoded.map(lambda source_ids, target_ids, labels: (tf.size(source_ids), tf.size(labels)))


def _batches(dataset, count):
    return [(inputs["source_ids"], inputs["target_ids"], labels)
            for inputs, labels in dataset.take(count).as_numpy_iterator()]


@pytest.mark.slow
def test_training_input_batches_by_the_token_budget_and_resumes_in_place(prepared, small_run):
    source, shards, _ = prepared
    ready = PreparedCorpus(shards)
    budget = 96
    per_pass = data.batch_count(_lengths(ready.encoded(ready.files)), budget, MAX_LENGTH)
    stream = ready.training_input(budget, MAX_LENGTH, shuffle_buffer=50, seed=3)
    first = _batches(stream(tf.distribute.InputContext()), 2 * per_pass)

    # One pass: distinct pairs, full batches of the on-the-fly pipeline's sizes.
    seen = collections.Counter(
        tuple(row[row != 0]) for _, _, labels in first[:per_pass] for row in labels)
    tokenizer = run_folder.load_tokenizer(small_run)
    on_the_fly = data.encode_pairs(data.corpus(str(source)).pairs("train"), tokenizer)
    reference = list(data.token_batches(on_the_fly, budget, MAX_LENGTH, drop_remainder=True)
                     .as_numpy_iterator())
    assert sorted(len(b[0]) for b in first[:per_pass]) == sorted(len(l) for _, l in reference)
    everything = collections.Counter(tuple(l) for _, _, l in on_the_fly.as_numpy_iterator()
                                     if len(l) <= MAX_LENGTH)
    assert all(seen[row] <= everything[row] for row in seen)
    for source_ids, target_ids, labels in first:
        assert source_ids.size <= budget and labels.size <= budget
    # The next pass is another order of the same data.
    second = collections.Counter(
        tuple(row[row != 0]) for _, _, labels in first[per_pass:] for row in labels)
    assert sum(second.values()) == sum(seen.values())
    assert [len(b[2]) for b in first[:per_pass]] != [len(b[2]) for b in first[per_pass:]]

    # A run resumed at a step (here across the end of a pass) gets the
    # batches the uninterrupted run would have had.
    for start in (per_pass - 2, per_pass + 1):
        resumed = _batches(ready.training_input(budget, MAX_LENGTH, shuffle_buffer=50, seed=3,
                                                start_step=start)(tf.distribute.InputContext()), 3)
        for got, expected in zip(resumed, first[start:start + 3]):
            for a, b in zip(got, expected):
                np.testing.assert_array_equal(a, b)


@pytest.mark.slow
def test_workers_read_disjoint_files_with_a_share_of_the_budget(prepared):
    _, shards, _ = prepared
    ready = PreparedCorpus(shards)
    stream = ready.training_input(192, MAX_LENGTH, shuffle_buffer=0, seed=3)
    rows = []
    for index in range(2):
        context = tf.distribute.InputContext(num_input_pipelines=2, input_pipeline_id=index,
                                             num_replicas_in_sync=2)
        per_pass = data.batch_count(_lengths(ready.encoded(ready.files[index::2])), 96, MAX_LENGTH)
        batches = _batches(stream(context), per_pass)
        assert all(labels.size <= 96 for _, _, labels in batches)
        rows.append({tuple(row[row != 0]) for _, _, labels in batches for row in labels})
    own = [{tuple(l) for _, _, l in ready.encoded(ready.files[i::2]).as_numpy_iterator()}
           for i in range(2)]
    assert rows[0] <= own[0] and rows[1] <= own[1] and rows[0] and rows[1]
    with pytest.raises(ValueError, match="3 shard files for 4 workers; prepare it with --shards 4"):
        stream(tf.distribute.InputContext(num_input_pipelines=4, input_pipeline_id=3,
                                          num_replicas_in_sync=4))


def _metrics(run_dir):
    with open(os.path.join(run_dir, "logs", "metrics.jsonl")) as lines:
        return [json.loads(line) for line in lines]


@pytest.mark.slow
def test_train_py_killed_on_prepared_data_resumes_at_its_place_in_the_data(prepared, tmp_path):
    """train.py killed after a checkpoint and started again gives the loss
    curve of an uninterrupted run, step for step: the resumed run restores
    the weights and optimizer and reads on from the batch the killed one
    had reached (no dropout, so that a step depends on its batch alone)."""
    _, shards, info = prepared
    steps = 24
    settings = {key: getattr(CONFIG, key) for key in (
        "num_encoder_layers", "num_decoder_layers", "d_model", "d_ff", "num_heads")}
    settings |= {"max_length": MAX_LENGTH, "dropout": 0.0}
    options = RunOptions(output_dir=str(tmp_path / "whole"), dataset=f"prepared:{shards}",
                         overrides=settings, batch_tokens=128, steps=steps, eval_every_steps=4,
                         checkpoint_every_steps=4, bleu_sentences=0, seed=5,
                         verbose=0)
    command = [os.path.join(processes.ROOT, "examples", "train.py"), "--dataset", options.dataset,
               *(f"--set={key}={value}" for key, value in settings.items()), "--batch-tokens",
               "128", "--steps", str(steps), "--eval-every-steps", "4",
               "--checkpoint-every-steps", "4", "--bleu-sentences", "0", "--seed", "5"]
    killed_dir = str(tmp_path / "killed")
    run = functools.partial(subprocess.Popen, env=processes.environment(),
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    killed = run([sys.executable, *command, "--output", killed_dir])
    saved = os.path.join(killed_dir, "checkpoints", "saved.jsonl")
    deadline = time.monotonic() + 300
    while not os.path.exists(saved) or not open(saved).read().strip():
        assert killed.poll() is None, killed.communicate()[0][-3000:]
        assert time.monotonic() < deadline, "no checkpoint appeared"
        time.sleep(0.02)
    killed.send_signal(signal.SIGKILL)
    killed.wait()
    assert len(_metrics(killed_dir)) < steps // 4, "the run ended before it was killed"

    whole = run_training(options)  # the uninterrupted run, in this process
    assert whole["data"] == info["train"] and whole["final_step"] == steps
    again = run([sys.executable, *command, "--output", killed_dir])
    output = again.communicate(timeout=600)[0]
    assert again.returncode == 0, output[-3000:]
    restored = int(re.search(r"Restored \S+ \(step (\d+)\)", output).group(1))
    assert 0 < restored < steps - 8, output[-3000:]  # the comparison covers resumed epochs
    resumed, expected = _metrics(killed_dir), _metrics(options.output_dir)
    assert [log["step"] for log in resumed] == [log["step"] for log in expected]
    for got, want in zip(resumed, expected):
        np.testing.assert_allclose([got["loss"], got["val_loss"]], [want["loss"], want["val_loss"]],
                                   rtol=1e-4, err_msg=f"step {got['step']}")


@pytest.mark.slow
def test_prepared_data_refuses_a_run_with_another_tokenizer_in_one_line(prepared, tmp_path):
    _, shards, info = prepared
    options = RunOptions(output_dir=str(tmp_path / "run"), dataset=f"prepared:{shards}")
    other = tmp_path / "other"
    other.mkdir()
    data.train_tokenizer([f"ganz andere Wörter {i}" for i in range(200)], other / "tokenizer.model",
                         vocab_size=40)
    for changed in ({"output_dir": str(other)},
                    {"output_dir": str(tmp_path / "new"), "init_from": str(other)}):
        with pytest.raises(ValueError, match="was prepared with another tokenizer than") as error:
            prepare_tokenizer(dataclasses.replace(options, **changed),
                              data.corpus(f"prepared:{shards}"), chief=True)
        assert "\n" not in str(error.value)
    # A new run takes the data's tokenizer.
    os.makedirs(options.output_dir)
    tokenizer = prepare_tokenizer(options, data.corpus(f"prepared:{shards}"), chief=True)
    assert (run_folder.tokenizer_checksum(run_folder.tokenizer_files(run_folder.load_tokenizer(options.output_dir)))
            == run_folder.tokenizer_checksum(run_folder.tokenizer_files(tokenizer)) == info["tokenizer"]["checksum"])


@pytest.mark.slow
@pytest.mark.parametrize("whole_sentences", [dict(sentence_repeats=2),
                                             dict(sentences_last=0.2)])
def test_prepared_data_refuses_whole_sentence_options_in_one_line(prepared, tmp_path,
                                                                  whole_sentences):
    """Token ids cannot tell a sentence from a phrase: repeating sentences or
    reading them last is refused before the run's folder is made."""
    _, shards, _ = prepared
    options = RunOptions(output_dir=str(tmp_path / "run"), dataset=f"prepared:{shards}",
                         **whole_sentences)
    with pytest.raises(ValueError, match="whole sentences cannot be told apart") as error:
        run_training(options)
    assert "\n" not in str(error.value)
    assert not os.path.exists(options.output_dir)


@pytest.mark.slow
def test_incomplete_or_damaged_folders_are_refused(prepared, tmp_path):
    _, shards, _ = prepared
    copy = tmp_path / "copy"
    shutil.copytree(shards, copy)
    os.remove(copy / "train-00001-of-00003.tfrecord")
    with pytest.raises(ValueError, match="should hold 3 training shards but has 2"):
        data.corpus(f"prepared:{copy}")
    os.remove(copy / "dataset.json")
    with pytest.raises(ValueError, match="holds no dataset.json"):
        data.corpus(f"prepared:{copy}")
    with pytest.raises(ValueError, match="holds source-target pairs, not de-en"):
        data.corpus(f"prepared:{shards}", "de", "en")
    with pytest.raises(ValueError, match="token ids only"):
        data.corpus(f"prepared:{shards}").pairs("train")


def test_one_in_process_worker_writes_shards_that_read_back_as_training_reads_the_corpus(
        small_run, tmp_path):
    """The quick form of the pipeline: a small corpus, one worker in this
    process; the shards hold the pairs the on-the-fly pipeline keeps, and
    the held-out pairs and the tokenizer travel with them."""
    source = write_corpus(tmp_path / "corpus", sizes=(60, 4, 3))
    tokenizer = run_folder.load_tokenizer(small_run)
    info = prepare_data(data.corpus(str(source)), tokenizer, tmp_path / "shards", shards=2,
                        max_length=MAX_LENGTH, parts=1)
    ready = data.corpus(f"prepared:{tmp_path / 'shards'}")
    on_the_fly = data.encode_pairs(data.corpus(str(source)).pairs("train"), tokenizer)
    assert _rows(ready.encoded(ready.files)) == _rows(data.length_filter(on_the_fly, MAX_LENGTH))
    assert info["train"] == dataclasses.asdict(data.length_report(on_the_fly, MAX_LENGTH))
    assert len(list(ready.pairs("test").as_numpy_iterator())) == 3
    ready.check_tokenizer(tokenizer, "the small run")
