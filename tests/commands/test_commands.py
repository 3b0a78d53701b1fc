"""Bad input at the command line: a one-line error on standard error and a
non-zero status, or warnings that name the lines while the rest is
processed; never a traceback, and never a lost or half-written file the
user already had.

Each command is its script run as `python SCRIPT ARGS` runs it, in this
process (`helpers.commands.command`: the same messages and exit status);
what belongs to the process (bytes on its standard input, Ctrl-C) is
tested in one."""

import os
import shutil
import signal
import socket
import subprocess
import sys
import warnings

import pytest

from helpers import processes
from helpers.bfloat16 import needs_bfloat16
from helpers.commands import command, messages, process_command
from keras_transformer import cpu_features
from keras_transformer.decoding import Translator
from keras_transformer.textfiles import TruncationWarning

GOOD = ["Das Haus ist groß.", "der Baum und das Haus", "Hier war ein Haus nicht klein."]
LONG = "Haus Baum groß " * 1000  # 15,000 characters


def _error(result, *fragments):
    """`command`'s result: a failure with exactly one error line, holding
    every fragment."""
    status, _, lines = result
    errors = [line for line in lines if ": error: " in line]
    assert status != 0 and len(errors) == 1, lines
    for fragment in fragments:
        assert fragment in errors[0], errors[0]
    return errors[0]


def _earlier_output(tmp_path, name="out.txt"):
    path = tmp_path / name
    path.write_text("an earlier translation\n")
    return path


def _expected(run, lines):
    """What translate writes for `lines`: each line's sentences translated
    and joined back (`Translator.translate_documents`), blank lines empty."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", TruncationWarning)
        return Translator.from_directory(str(run)).translate_documents(
            [line if line.strip() else "" for line in lines])


@pytest.mark.slow
def test_translate_repairs_a_damaged_file_and_names_the_lines(small_run, tmp_path):
    source = tmp_path / "de.txt"
    source.write_bytes(b"\xef\xbb\xbf" + GOOD[0].encode() + b"\r\n"   # 1: BOM, CRLF
                       + b"Stra\xdfe und Haus\r\n"                      # 2: Latin-1 byte
                       + b"\r\n"                                        # 3: empty
                       + b"   \n"                                       # 4: blank
                       + b"Haus\x00Baum\n"                              # 5: NUL
                       + LONG.encode() + b"\n"                          # 6: over-long
                       + GOOD[1].encode() + b"\n"
                       + GOOD[2].encode())                              # 8: no final LF
    output = _earlier_output(tmp_path)
    status, stdout, messages = command("examples/translate.py", small_run, "--input", source,
                                       "--output", output, "--overwrite")
    assert status == 0 and stdout == b""
    name = str(source)
    assert messages == [
        f"translate.py: warning: {name}: line 2 had bytes that are not UTF-8; they were replaced "
        "with U+FFFD",
        f"translate.py: warning: {name}: line 5 had NUL bytes; they were read as spaces",
        f"translate.py: warning: {name}: line 6 exceeded the model's 23 tokens; only their first "
        "23 tokens were translated."]
    translated = output.read_bytes().decode("utf-8").split("\n")
    assert translated[-1] == "" and len(translated) == 9  # one line per input line, LF-ended
    expected = _expected(small_run, [GOOD[0], "Stra\ufffde und Haus", "", "   ", "Haus Baum", LONG,
                                     GOOD[1], GOOD[2]])
    assert translated[:-1] == expected
    assert translated[2] == translated[3] == "" and len(set(translated)) > 3
    assert not [name for name in os.listdir(tmp_path) if name.startswith(".")]


@pytest.mark.slow
def test_translate_reads_invalid_utf8_from_standard_input(small_run):
    status, stdout, messages = process_command("examples/translate.py", small_run,
                                               stdin=b"Das Haus\n\xff\xfe Baum\nder Baum\n")
    assert status == 0
    assert messages == ["translate.py: warning: standard input: line 2 had bytes that are not "
                        "UTF-8; they were replaced with U+FFFD"]
    assert stdout.decode().split("\n") == _expected(small_run, ["Das Haus", "\ufffd\ufffd Baum",
                                                                "der Baum"]) + [""]


@pytest.mark.slow
@pytest.mark.parametrize("precision", [None, pytest.param("bfloat16", marks=needs_bfloat16)])
def test_translate_decodes_float32_on_eigens_kernels(small_run, tmp_path, precision):
    """TensorFlow says at its import whether oneDNN's kernels are on
    (shown with --verbose): off for a float32 search, which Eigen's run
    faster (`batch_defaults.decoding_kernels`); for bfloat16, TensorFlow's
    own rule for this CPU (`cpu_features.onednn_enabled`: on only with the
    neural-network features), whatever the CPU the test runs on; and as
    TF_ENABLE_ONEDNN_OPTS says where the environment sets it (run the suite
    with it unset, 0 and 1 to see all three)."""
    source = tmp_path / "in.de"
    source.write_text("Das Haus\n")
    env = processes.environment()
    result = subprocess.run(
        [sys.executable, os.path.join(processes.ROOT, "examples/translate.py"), small_run,
         "--input", source, "--verbose"] + (["--precision", precision] if precision else []),
        capture_output=True, text=True, timeout=300, env=env)
    assert result.returncode == 0, result.stderr[-2000:]
    expected = (precision is not None or "TF_ENABLE_ONEDNN_OPTS" in env) and \
        cpu_features.onednn_enabled(env)
    assert ("oneDNN custom operations are on" in result.stderr) == expected


@pytest.mark.slow
def test_translate_takes_an_export_folder_as_a_run(small_run, small_export):
    status, stdout, messages = command("examples/translate.py", small_export,
                                       stdin="\n".join(GOOD).encode() + b"\n")
    assert status == 0 and messages == []
    assert stdout.decode().split("\n") == _expected(small_run, GOOD) + [""]


def test_translate_checks_its_files_before_any_work(small_run, tmp_path):
    output = _earlier_output(tmp_path)
    source = tmp_path / "de.txt"
    source.write_text("Das Haus\n")
    translate = ["examples/translate.py", small_run, "--input", source]
    _error(command(*translate, "--output", output), f"{output} exists; pass --overwrite")
    _error(command(*translate, "--output", tmp_path / "missing" / "en.txt"),
           "folder", "missing does not exist; create it first")
    _error(command(*translate, "--output", source / "en.txt"), "de.txt is not a folder")
    _error(command("examples/translate.py", small_run, "--input", tmp_path / "nothing.txt"),
           "nothing.txt does not exist")
    utf16 = tmp_path / "utf16.txt"
    utf16.write_bytes("Das Haus\n".encode("utf-16"))
    _error(command("examples/translate.py", small_run, "--input", utf16),
           "utf16.txt is UTF-16 text", "iconv -f UTF-16 -t UTF-8")
    empty = tmp_path / "empty.txt"
    empty.write_bytes(b"")
    status, stdout, messages = command("examples/translate.py", small_run, "--input", empty)
    assert status == 0 and stdout == b"" and messages == [
        f"translate.py: warning: {empty} is empty; there is nothing to translate"]
    status, _, _ = command(*translate, "--beam-size", "0")
    assert status == 2  # argparse's usage error
    _error(command("examples/translate.py", tmp_path / "no-run", "--input", source),
           "no-run is not a folder")
    assert output.read_text() == "an earlier translation\n"


def test_translate_refuses_overlong_lines_when_asked_before_translating(small_run, tmp_path):
    source = tmp_path / "de.txt"
    source.write_text(f"{GOOD[0]}\n{LONG}\n{GOOD[1]}\n{LONG}\n")
    output = _earlier_output(tmp_path)
    _error(command("examples/translate.py", small_run, "--input", source, "--output", output,
                    "--overwrite", "--overlong", "error"),
           f"{source}: lines 2 and 4 exceeded the model's 23 tokens", "shorten or split them")
    assert output.read_text() == "an earlier translation\n"


@pytest.mark.slow
def test_ctrl_c_while_translating_keeps_the_earlier_output(small_run, tmp_path):
    source = tmp_path / "de.txt"
    # One over-long line: its warning comes with the first window of 256
    # lines, and eleven windows are still to translate when Ctrl-C arrives.
    source.write_text("\n".join([LONG] + [f"{GOOD[i % 3]} {i}" for i in range(3000)]) + "\n")
    output = _earlier_output(tmp_path)
    process = subprocess.Popen(
        [sys.executable, os.path.join(processes.ROOT, "examples/translate.py"), str(small_run),
         "--input", str(source), "--output", str(output), "--overwrite", "--window", "256"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        # faulthandler: a process still running long after Ctrl-C is sent
        # SIGABRT below, and writes where each of its threads stands.
        env=processes.environment(PYTHONFAULTHANDLER=1),
        # Ctrl-C as at a terminal: a shell starts background jobs (a CI
        # script run with `&`) with SIGINT ignored, and Python then installs
        # no KeyboardInterrupt handler, so the child gets the default back.
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    seen = []
    for line in process.stderr:
        seen.append(line)
        if "exceeded the model's" in line:
            break
    process.send_signal(signal.SIGINT)
    try:
        _, rest = process.communicate(timeout=120)
    except subprocess.TimeoutExpired:
        process.send_signal(signal.SIGABRT)
        pytest.fail("translate.py still ran 120 s after Ctrl-C:\n"
                    + "".join(seen) + process.communicate(timeout=60)[1][-6000:])
    assert process.returncode == 130, "".join(seen) + rest
    assert messages(rest)[-1] == ("translate.py: interrupted; nothing was written; earlier "
                                   "output is unchanged")
    assert output.read_text() == "an earlier translation\n"
    assert sorted(os.listdir(tmp_path)) == ["de.txt", "out.txt"]


def test_evaluate_refuses_files_of_different_lengths_before_translating(small_run, tmp_path):
    source, reference = tmp_path / "src.de", tmp_path / "ref.en"
    source.write_text("Das Haus ist groß.\nder Baum\n")
    reference.write_text("The house is big.\n")
    result = command("examples/evaluate.py", small_run, "--source-file", source,
                     "--reference-file", reference)
    _error(result, f"{source} has 2 lines but {reference} has 1", "give files of equal length")
    assert b"BLEU" not in result[1]
    source.write_text("")
    reference.write_text("")
    _error(command("examples/evaluate.py", small_run, "--source-file", source,
                    "--reference-file", reference), "are empty; nothing to score")
    # An imported model's folder has no run.json: no dataset to fall back on.
    _error(command("examples/evaluate.py", small_run), "holds no run.json",
           "give --source-file and --reference-file")


@pytest.mark.slow
def test_evaluate_scores_every_line_and_names_the_repaired_ones(small_run, tmp_path):
    source, reference = tmp_path / "src.de", tmp_path / "ref.en"
    source.write_bytes(b"Das Haus ist gro\xdf.\r\n\r\nder Baum\r\n")
    reference.write_bytes(b"\xef\xbb\xbfThe house is big.\r\n\r\nthe tree\r\n")
    status, stdout, messages = command("examples/evaluate.py", small_run, "--source-file", source,
                                       "--reference-file", reference)
    assert status == 0 and "(3 sentences)" in stdout.decode()
    assert messages == [f"evaluate.py: warning: {source}: line 1 had bytes that are not UTF-8; "
                        "they were replaced with U+FFFD"]


def test_train_with_a_bad_dataset_leaves_no_folder_and_keeps_an_existing_one(tmp_path):
    new = tmp_path / "run"
    _error(command("examples/train.py", "--output", new, "--dataset", "nonexistent"),
           "Unknown dataset 'nonexistent'")
    assert not new.exists()
    existing = tmp_path / "existing"
    existing.mkdir()
    (existing / "notes.txt").write_text("mine")
    _error(command("examples/train.py", "--output", existing, "--dataset", "nonexistent"),
           "Unknown dataset 'nonexistent'")
    assert os.listdir(existing) == ["notes.txt"]
    data = tmp_path / "data"
    data.mkdir()
    (data / "train.tsv").write_text("Haus\thouse\n")
    _error(command("examples/train.py", "--output", existing / "notes.txt", "--dataset", data),
           "notes.txt is a file; give a folder path")
    assert (existing / "notes.txt").read_text() == "mine"
    status, _, _ = command("examples/train.py", "--output", new, "--steps", "-3")
    assert status == 2 and not new.exists()


def test_export_and_import_refuse_an_existing_output_before_reading_anything(small_run, tmp_path):
    existing = tmp_path / "export"
    existing.mkdir()
    (existing / "keep.txt").write_text("earlier export")
    _error(command("export/export_model.py", tmp_path / "no-run", "--output", existing),
           f"{existing} exists; pass --overwrite")
    _error(command("examples/import_pretrained.py", tmp_path / "no-model", "--output", existing),
           f"{existing} exists; pass --overwrite")
    assert os.listdir(existing) == ["keep.txt"]
    _error(command("export/export_model.py", tmp_path / "no-run", "--output", tmp_path / "new"),
           "no-run is not a folder")
    damaged = tmp_path / "damaged-run"
    shutil.copytree(small_run, damaged)
    (damaged / "model.keras").write_bytes(b"")
    _error(command("export/export_model.py", damaged, "--output", existing, "--overwrite"),
           "Cannot load the model", "model.keras")
    assert os.listdir(existing) == ["keep.txt"]
    assert sorted(os.listdir(tmp_path)) == ["damaged-run", "export"]


def test_other_commands_refuse_existing_outputs_and_missing_runs(small_run, tmp_path):
    picture = tmp_path / "attention.png"
    picture.write_bytes(b"an earlier picture")
    _error(command("examples/visualize_attention.py", small_run, "Das Haus", "--output", picture),
           f"{picture} exists; pass --overwrite")
    assert picture.read_bytes() == b"an earlier picture"
    _error(command("examples/average_checkpoints.py", tmp_path / "no-run"), "no-run is not a folder")


def test_serve_checks_its_options_before_loading_the_model(small_run, small_export, tmp_path):
    serve = "examples/serve.py"
    _error(command(serve, tmp_path / "nothing"), "nothing is not a folder; give a training run")
    _error(command(serve, small_run, "--runtime", "onnx"),
           "is a run folder, which the keras runtime translates; the onnx runtime reads an export")
    _error(command(serve, small_export, "--runtime", "ctranslate2"),
           "has no ctranslate2; export it again with --formats ctranslate2")
    _error(command(serve, small_run), "does not say which languages it translates; give "
                                      "--languages")
    assert command(serve, small_run, small_export, "--languages", "de-en")[0] == 2  # usage
    _error(command(serve, small_run, small_export, "--languages", "de-en", "de-en"),
           "Two models translate the same pair")
    (tmp_path / "keys").write_text("\n  \n")
    languages = ["--languages", "de-en"]
    _error(command(serve, small_run, *languages, "--api-keys", tmp_path / "keys"),
           "holds no key; write one key a line")
    _error(command(serve, small_run, *languages, "--api-keys", tmp_path / "none"),
           "Cannot read --api-keys")
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        _error(command(serve, small_run, *languages, "--port", taken.getsockname()[1]),
               "Cannot listen on 127.0.0.1:")
    # Glossaries: the file, the pair, the runtime, before the models load.
    terms = tmp_path / "terms.tsv"
    terms.write_text("Haus\thouse\nBaum tree\n")
    _error(command(serve, small_run, *languages, "--glossary", f"it={terms}"),
           "terms.tsv, line 2: a TSV glossary line is a source term, a tab and a target term")
    terms.write_text("Haus\thouse\n")
    _error(command(serve, small_run, *languages, "--glossary", f"it:fr-en={terms}"),
           "--glossary it: no model translates fr to en (the models translate de-en)")
    _error(command(serve, small_run, *languages, "--slots", "4", "--glossary", f"it={terms}"),
           "searches slots (--slots); glossaries are obeyed by the keras runtime's batches")
    _error(command(serve, small_export, *languages, "--glossary", f"it={terms}"),
           "has the saved_model runtime, which runs its own search")
    (tmp_path / "empty.tsv").write_text("")
    _error(command(serve, small_run, *languages, "--glossary", f"it={tmp_path / 'empty.tsv'}"),
           "empty.tsv holds no entry")
    assert command(serve, small_run, *languages, "--glossary", "it")[0] == 2  # usage


def test_serve_checks_assign_glossaries_before_loading_the_model(small_run, tmp_path):
    """`--assign-glossaries KEY` needs the keys and the folder, and KEY one
    of the keys; the folder is left as it was."""
    serve, languages = "examples/serve.py", ["--languages", "de-en"]
    status, _, lines = command(serve, small_run, *languages, "--assign-glossaries", "a-key")
    assert status == 2 and "--assign-glossaries goes with --api-keys FILE and --glossaries-dir " \
        "DIR" in lines[-1]
    (tmp_path / "keys").write_text("a-key\n")
    _error(command(serve, small_run, *languages, "--api-keys", tmp_path / "keys",
                   "--glossaries-dir", tmp_path / "glossaries", "--assign-glossaries", "b-key"),
           f"--assign-glossaries: that key is not one of --api-keys {tmp_path / 'keys'}")
    assert not (tmp_path / "glossaries").exists()


def test_serve_names_a_state_dir_it_cannot_use_before_loading_the_model(small_run, tmp_path):
    (tmp_path / "file").write_text("")
    _error(command("examples/serve.py", small_run, "--languages", "de-en", "--state-dir",
                   tmp_path / "file" / "state"),
           f"Cannot use --state-dir {tmp_path / 'file' / 'state'}: Not a directory")


def test_translate_obeys_a_glossary_and_names_its_mistakes(small_run, tmp_path):
    terms = tmp_path / "terms.tsv"
    terms.write_text("Haus\tBaum\n")
    text = "das Haus ist groß\nder Baum\n".encode()
    status, out, err = command("examples/translate.py", small_run, "--glossary", terms,
                               stdin=text)
    assert status == 0, err
    first, second = out.decode().splitlines()
    assert "Baum" in first  # the term's target
    # A line without the term: as without the glossary.
    assert second == command("examples/translate.py", small_run, stdin=text)[1].decode(
    ).splitlines()[1]
    terms.write_text("Haus\tBaum\nHaus\tklein\n")
    _error(command("examples/translate.py", small_run, "--glossary", terms,
                   stdin=b"das Haus\n"),
           "terms.tsv, lines 1 and 2: the source term 'Haus' has two targets")
    _error(command("examples/translate.py", small_run, "--glossary", tmp_path / "none.tsv",
                   stdin=b"das Haus\n"), "Cannot read the glossary")


def test_corpus_commands_check_their_options_before_any_work(small_run, tmp_path):
    existing = _earlier_output(tmp_path, "prepared")
    _error(command("examples/prepare_data.py", "--dataset", "ding", "--tokenizer", small_run,
                   "--output", existing, "--shards", "2"), f"{existing} exists; pass --overwrite")
    _error(command("examples/prepare_data.py", "--dataset", "ding", "--tokenizer", small_run,
                   "--output", tmp_path / "new", "--shards", "2", "--workers", "2"),
           "unrecognized arguments: --workers 2 (neither this command's nor an Apache Beam")
    status, _, _ = command("examples/translate_corpus.py", small_run, "--input", "x", "--output",
                           tmp_path / "bt", "--sampling-temperature", "2")
    assert status == 2
    missing = tmp_path / "no-export"
    _error(command("examples/translate_corpus.py", missing, "--input", "x", "--output",
                   tmp_path / "bt"),
           f"{missing} is not a folder; give a training run, an imported model or an export")
    assert sorted(os.listdir(tmp_path)) == ["prepared"]


def _calibrated_run(small_run, tmp_path):
    """A copy of the small run with a calibrator of made-up weights for its
    model (what `calibrate` would write), and its translator."""
    import numpy as np

    from keras_transformer import trust
    from keras_transformer.decoding import quality

    run = tmp_path / "calibrated"
    shutil.copytree(small_run, run)
    translator = Translator.from_directory(str(run))
    count = len(quality.SIGNALS)
    trust.Calibrator(quality.SIGNALS, np.zeros(count), np.ones(count),
                     np.linspace(-1, 1, count), 30.0, 0.1, -3.0,
                     quality.model_digest(translator.model), translator.alpha).save(run)
    return run, Translator.from_directory(str(run))


def test_translate_writes_a_json_line_of_translation_confidence_and_flags(small_run, tmp_path):
    import json

    run, translator = _calibrated_run(small_run, tmp_path)
    lines = [GOOD[0], "", "🪨", f"{GOOD[0]} {GOOD[2]}", "!"]
    source = tmp_path / "de.txt"
    source.write_text("\n".join(lines) + "\n")
    status, stdout, messages = command("examples/translate.py", run, "--input", source,
                                       "--format", "jsonl")
    assert status == 0 and messages == []
    found = [json.loads(line) for line in stdout.decode().splitlines()]
    assert [each["translation"] for each in found] == _expected(run, lines)
    assert found[1] == {"translation": "", "confidence": None, "flags": []}
    assessed = translator.assess([GOOD[0]], [found[0]["translation"]])[0]
    assert found[0]["confidence"] == round(assessed.confidence, 3)
    assert found[0]["flags"] == list(assessed.flags)
    # A line of two sentences: the lesser confidence, the flags of either
    # (each translated as the window's sentences are, together).
    window = translator.translate([GOOD[0], "🪨", GOOD[0], GOOD[2], "!"])
    both = translator.assess([GOOD[0], GOOD[2]], window[2:4])
    assert found[3]["confidence"] == round(min(q.confidence for q in both), 3)
    assert set(found[3]["flags"]) == {flag for q in both for flag in q.flags}
    for each in found:
        assert set(each) == {"translation", "confidence", "flags"}
        assert set(each["flags"]) <= {"repetition", "runaway", "copy", "untranslated", "omission"}
    # Without a calibrator: null, said once.
    status, stdout, messages = command("examples/translate.py", small_run, "--input", source,
                                       "--format", "jsonl")
    assert status == 0 and len(messages) == 1 and "its confidence is null" in messages[0]
    assert all(json.loads(line)["confidence"] is None for line in stdout.decode().splitlines())
    status, _, _ = command("examples/translate.py", run, "--input", source, "--format", "jsonl",
                           "--n-best", "2")
    assert status == 2


@pytest.mark.slow
def test_calibrate_fits_the_runs_calibrator_on_files_and_refuses_too_few(small_run, tmp_path):
    """Half the references are the model's own translations (good), half
    another sentence's (most bad): the calibrator that `calibrate` writes,
    which the run's translator reads, is calibrated: its mean confidence is
    the share of good translations."""
    import numpy as np

    from helpers.small_run import WORDS
    from keras_transformer import trust

    run = tmp_path / "run"
    shutil.copytree(small_run, run)
    rng = np.random.default_rng(7)
    sources = [" ".join(rng.choice(WORDS, size=rng.integers(2, 7))) + "." for _ in range(80)]
    translations = Translator.from_directory(str(run)).translate(sources)
    references = [t if i % 2 else translations[(i + 1) % 80] + " und so weiter"
                  for i, t in enumerate(translations)]
    (tmp_path / "dev.de").write_text("\n".join(sources) + "\n")
    (tmp_path / "dev.en").write_text("\n".join(references) + "\n")
    status, stdout, messages = command("examples/calibrate.py", run, "--source-file",
                                       tmp_path / "dev.de", "--reference-file", tmp_path / "dev.en")
    assert status == 0 and messages == [], messages
    assert f"Wrote {run / trust.CALIBRATION_FILE}" in stdout.decode()
    translator = Translator.from_directory(str(run))
    assert translator.calibration_note is None
    import sacrebleu

    good = [sacrebleu.sentence_chrf(t, [r]).score >= trust.TARGET
            for t, r in zip(translations, references)]
    confidence = np.array([q.confidence for q in translator.assess(sources, translations)])
    assert np.all((0 <= confidence) & (confidence <= 1))
    assert abs(confidence.mean() - np.mean(good)) < 0.1
    (tmp_path / "few.de").write_text("\n".join(sources[:20]) + "\n")
    (tmp_path / "few.en").write_text("\n".join(references[:20]) + "\n")
    _error(command("examples/calibrate.py", run, "--source-file", tmp_path / "few.de",
                   "--reference-file", tmp_path / "few.en"), "at least 50 held-out sentences")
    _error(command("examples/calibrate.py", tmp_path / "nothing"), "is not a folder")
    status, _, _ = command("examples/calibrate.py", run, "--source-file", tmp_path / "dev.de")
    assert status == 2


@pytest.mark.slow
def test_lines_typed_at_a_terminal_are_translated_as_they_come(small_run):
    """Standard input a terminal (a pseudo-terminal here): each line's
    translation is written before the next line is typed, by the lone
    sentence's search, as the Translator translates it."""
    import pty
    import select

    expected = Translator.from_directory(str(small_run)).translate(GOOD[:2])
    controller, terminal = pty.openpty()
    process = subprocess.Popen([sys.executable, os.path.join(processes.ROOT,
                                                             "examples/translate.py"), small_run],
                               stdin=terminal, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               env=processes.environment())
    try:
        for line, translation in zip(GOOD[:2], expected):
            os.write(controller, line.encode() + b"\n")
            ready, _, _ = select.select([process.stdout], [], [], 120)
            assert ready, "no translation before the next line"
            assert process.stdout.readline().decode().rstrip("\n") == translation
        os.write(controller, b"\x04")  # end of input (Ctrl-D)
        assert process.wait(timeout=60) == 0
    finally:
        process.kill()
        os.close(controller)
        os.close(terminal)
