"""The installed command, `keras-transformer`: its version, the commands its
help lists, and how it runs a command module (the name in its messages,
errors, exit statuses), with a test module in the command table."""

import importlib
import importlib.util
import os
import re
import subprocess
import sys
import warnings

import pytest

import keras_transformer
from keras_transformer import cli
from keras_transformer.commands import COMMANDS, main
from helpers import processes
from helpers.processes import ROOT

PLANNED = ["train", "translate", "evaluate", "calibrate", "export", "import", "average",
           "visualize", "demo", "reverse-task", "prepare-data", "translate-corpus", "serve"]
ECHO = {"echo": ("helpers.echo_command", "prints its words")}
# The script of each command, and the command module holding its work.
SCRIPTS = {"examples/train.py": "train", "examples/translate.py": "translate",
           "examples/evaluate.py": "evaluate", "examples/calibrate.py": "calibrate",
           "export/export_model.py": "export",
           "examples/import_pretrained.py": "import", "examples/average_checkpoints.py": "average",
           "examples/visualize_attention.py": "visualize", "examples/demo.py": "demo",
           "examples/reverse_task.py": "reverse-task", "examples/prepare_data.py": "prepare-data",
           "examples/translate_corpus.py": "translate-corpus", "examples/serve.py": "serve"}


@pytest.fixture(autouse=True)
def keep_warning_display(monkeypatch):
    # cli.run prints Python warnings its own way; keep pytest's afterwards.
    monkeypatch.setattr(warnings, "showwarning", warnings.showwarning)


def run(capsys, *argv, commands=COMMANDS):
    """`keras-transformer ARGV`: (exit status, stdout, stderr lines)."""
    with pytest.raises(SystemExit) as ended:
        main(list(argv), commands)
        raise SystemExit(0)
    out, err = capsys.readouterr()
    return ended.value.code or 0, out, err.splitlines()


def test_version_is_the_package_version(capsys):
    status, out, _ = run(capsys, "--version")
    assert status == 0
    assert out == f"keras-transformer {keras_transformer.__version__}\n"


def test_help_lists_every_command(capsys):
    assert sorted(COMMANDS) == sorted(PLANNED)
    status, out, _ = run(capsys, "--help")
    assert status == 0
    assert out.startswith("usage: keras-transformer [-h] [--version] COMMAND [ARGUMENTS ...]")
    listed = out[out.index("\ncommands:\n"):].splitlines()[2:]
    assert [line.split(None, 1) for line in listed] == [
        [name, summary] for name, (_, summary) in COMMANDS.items()]


def test_an_unknown_command_is_a_usage_error(capsys):
    status, _, err = run(capsys, "translat")
    assert status == 2
    assert err[-1].startswith("keras-transformer: error: argument COMMAND: invalid choice: "
                              "'translat'")
    status, _, err = run(capsys)
    assert status == 2 and "required: COMMAND" in err[-1]


def test_a_command_runs_with_its_own_options(capsys):
    assert run(capsys, "echo", "--times", "2", "guten", "Morgen", commands=ECHO) == (
        0, "guten Morgen guten Morgen\n", [])
    status, out, _ = run(capsys, "echo", "--help", commands=ECHO)
    assert status == 0 and out.startswith("usage: keras-transformer echo [-h]")
    _, out, _ = run(capsys, "--help", commands=ECHO)
    assert out.endswith("\ncommands:\n  echo  prints its words\n")


def test_a_command_speaks_as_keras_transformer_command(capsys):
    status, _, err = run(capsys, "echo", "--times", "0", commands=ECHO)
    assert status == 2
    assert err[-1] == "keras-transformer echo: error: argument --times: must be >= 1, got 0"

    status, _, err = run(capsys, "echo", "--fail", "value", commands=ECHO)
    assert (status, err) == (1, ["keras-transformer echo: error: the words were wrong"])

    status, out, err = run(capsys, "echo", "--fail", "warn", "hallo", commands=ECHO)
    assert (status, out, err) == (0, "hallo\n", ["keras-transformer echo: warning: a word was "
                                                 "changed"])

    status, _, err = run(capsys, "echo", "--fail", "interrupt", commands=ECHO)
    assert (status, err) == (130, ["", "keras-transformer echo: interrupted; the echo was cut "
                                       "short"])
    # Outside a run, messages carry the script's name again.
    assert cli.program() != "keras-transformer echo"


@pytest.mark.parametrize("script", SCRIPTS)
def test_each_script_runs_its_command_s_main(script):
    """The scripts are thin: their `main` (and note after Ctrl-C) is the
    command's, so both have the same options, messages and statuses."""
    spec = importlib.util.spec_from_file_location("script", os.path.join(ROOT, script))
    loaded = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(loaded)
    command = importlib.import_module(COMMANDS[SCRIPTS[script]][0])
    assert loaded.main is command.main
    assert getattr(loaded, "INTERRUPTED", cli.INTERRUPTED) == getattr(
        command, "INTERRUPTED", cli.INTERRUPTED)


def test_every_command_has_its_script():
    assert sorted(SCRIPTS.values()) == sorted(COMMANDS)


@pytest.mark.parametrize("command", list(COMMANDS))
def test_each_command_s_help_is_under_its_installed_name(capsys, command):
    status, out, _ = run(capsys, command, "--help")
    assert status == 0
    assert out.startswith(f"usage: keras-transformer {command} [-h]")


def help_entries(out):
    """A command's `--help` output -> {option: its entry on one line}."""
    options = out[out.index("\noptions:\n"):]
    # One entry an option: "--name METAVAR  help", continued on indented lines.
    entries = re.split(r"\n  (?=-)", " ".join(options.split("\n  " + " " * 20)))[1:]
    return {entry.split()[0].rstrip(","): " ".join(entry.split()) for entry in entries}


def test_translate_help_says_what_each_option_does_and_its_default(capsys):
    _, out, _ = run(capsys, "translate", "--help")
    described = help_entries(out)
    assert {"--input", "--output", "--beam-size", "--alpha", "--batch-size", "--n-best",
            "--overlong", "--precision"} <= set(described)
    for option, text in described.items():
        if option in ("-h", "--overwrite", "--verbose", "--no-split", "--no-guard"):  # flags
            continue
        help = text.split(None, 2)[2]  # after the option and its value's name
        assert not help.startswith("(default") and re.search(r"\(?default: \S", help), text
    assert "--window WINDOW lines read ahead and sorted together (default: 4096)" in (
        described["--window"])
    assert "(default: truncate)" in described["--overlong"]


@pytest.mark.parametrize("command", list(COMMANDS))
def test_each_command_s_help_gives_a_default_once_and_only_a_real_one(capsys, command):
    _, out, _ = run(capsys, command, "--help")
    for text in help_entries(out).values():
        assert text.count("default:") <= 1, text
        assert not re.search(r"\(default: (None|\[\]|False)\)", text), text


def test_a_command_s_errors_name_it(capsys, tmp_path):
    missing = tmp_path / "nothing.txt"
    status, out, err = run(capsys, "translate", str(tmp_path), "--input", str(missing))
    assert (status, out) == (1, "")
    assert len(err) == 1 and err[0].startswith("keras-transformer translate: error: ")
    assert str(missing) in err[0]
    status, _, err = run(capsys, "translate", str(tmp_path), "--beam-size", "0")
    assert status == 2
    assert err[-1] == ("keras-transformer translate: error: argument --beam-size: must be >= 1, "
                       "got 0")


HELP_PROCESS = """
import contextlib, io, sys
from keras_transformer.commands import COMMANDS, main
for name in COMMANDS:
    with contextlib.redirect_stdout(io.StringIO()) as out, contextlib.suppress(SystemExit):
        main([name, "--help"])
    assert out.getvalue().startswith(f"usage: keras-transformer {name} [-h]"), name
    loaded = [module for module in ("tensorflow", "keras", "jax", "torch") if module in sys.modules]
    assert not loaded, f"{name} --help imported {loaded}"
"""


def test_every_command_s_help_imports_no_tensorflow_and_logs_nothing():
    """`keras-transformer COMMAND --help` for every command, one after the
    other in one fresh process: none imports TensorFlow, Keras, JAX or
    PyTorch, and nothing reaches standard error."""
    environment = processes.environment()
    del environment["TF_CPP_MIN_LOG_LEVEL"]
    done = subprocess.run([sys.executable, "-c", HELP_PROCESS], capture_output=True, text=True,
                          env=environment, timeout=120)
    assert (done.returncode, done.stderr) == (0, "")


def test_every_command_has_verbose(capsys):
    for command in COMMANDS:
        _, out, _ = run(capsys, command, "--help")
        assert "--verbose" in out, command


def test_train_s_defaults_are_the_run_options_and_its_strategies_the_backends():
    """train parses into `RunOptions` with their own defaults, and offers
    each strategy some Keras backend trains with, and only those."""
    from keras_transformer.commands import train
    from keras_transformer.names import ALL_STRATEGIES
    from keras_transformer.run_folder import RunOptions
    from keras_transformer.training import backends

    assert train.options_from(train.parse(["--output", "runs/x"])) == RunOptions(
        output_dir="runs/x")
    assert sorted(ALL_STRATEGIES) == sorted({name for offered in backends.STRATEGIES.values()
                                             for name in offered})
