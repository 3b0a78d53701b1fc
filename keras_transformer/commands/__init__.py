"""The installed command: `keras-transformer COMMAND [OPTIONS]`.

    keras-transformer --version
    keras-transformer --help               # the commands, and which this version has
    keras-transformer translate --help     # a command's options and their defaults

Each command is one module of this package, named in `COMMANDS`, with a
`main()` that parses the command line (`sys.argv[1:]`) and does the work:
the same function the scripts in `examples/` and `export/` call, so a
script and its command have the same options, messages and exit statuses.
A module may also set `INTERRUPTED`, the note printed after Ctrl-C (see
`cli.run`). Only the chosen command's module is imported, and none imports
TensorFlow before `main` has parsed its command line, so that `--help` and
bad options answer at once (tests/test_installed_command.py checks it).
A new command is one module and one line of `COMMANDS`.

The commands run under `cli.run` with the name `keras-transformer COMMAND`:
a mistake of the user's ends with one line, `keras-transformer translate:
error: ...`, and status 1 (argparse's usage errors: 2), Ctrl-C with status
130.
"""

import argparse
import importlib
import sys

from keras_transformer import __version__, cli

PROGRAM = "keras-transformer"
DESCRIPTION = 'The Transformer of "Attention Is All You Need" in Keras 3.'

# command name: (its module, what it does), in the order a user meets them.
COMMANDS = {
    "demo": ("keras_transformer.commands.demo",
             "train, evaluate, export, translate and plot, in one go"),
    "train": ("keras_transformer.commands.train",
              "train a translation model, or fine-tune one (--init-from)"),
    "average": ("keras_transformer.commands.average",
                "average a run's last checkpoints into averaged.keras"),
    "translate": ("keras_transformer.commands.translate",
                  "translate sentences, one a line"),
    "evaluate": ("keras_transformer.commands.evaluate",
                 "BLEU and chrF of a run on held-out pairs or on files"),
    "calibrate": ("keras_transformer.commands.calibrate",
                  "fit how far to trust a run's translations (their confidence)"),
    "visualize": ("keras_transformer.commands.visualize",
                  "draw the attention weights of one sentence"),
    "export": ("keras_transformer.commands.export",
               "export a run to SavedModel, ONNX and CTranslate2, each checked"),
    "import": ("keras_transformer.commands.import_pretrained",
               "import a pretrained model (OPUS-MT, fairseq WMT19) into a run folder"),
    "reverse-task": ("keras_transformer.commands.reverse_task",
                     "train a small model to reverse sequences: a quick check"),
    "prepare-data": ("keras_transformer.commands.prepare_data",
                     "tokenize a corpus into training shards (Apache Beam)"),
    "translate-corpus": ("keras_transformer.commands.translate_corpus",
                         "translate large corpora (Apache Beam)"),
    "serve": ("keras_transformer.commands.serve",
              "serve a model over HTTP (LibreTranslate's API, a page to try it)"),
}


def _parser(commands):
    width = max(map(len, commands))
    epilog = "\n".join(["commands:"] + [f"  {name:<{width}}  {summary}"
                                         for name, (_, summary) in commands.items()])
    parser = argparse.ArgumentParser(
        prog=PROGRAM, usage="%(prog)s [-h] [--version] COMMAND [ARGUMENTS ...]",
        description=DESCRIPTION, epilog=epilog,
        formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    parser.add_argument("command", choices=commands, metavar="COMMAND",
                        help=f"one of the commands below; `{PROGRAM} COMMAND --help` gives its "
                             "options")
    parser.add_argument("arguments", nargs=argparse.REMAINDER, help=argparse.SUPPRESS)
    return parser


def main(argv=None, commands=COMMANDS):
    """Runs `keras-transformer` with `argv` (default: the command line);
    `commands` is the table of commands (`COMMANDS`)."""
    parser = _parser(commands)
    chosen = parser.parse_args(sys.argv[1:] if argv is None else argv)
    module_name, _ = commands[chosen.command]
    prog = f"{PROGRAM} {chosen.command}"
    # The command's main() reads its options from the command line, and
    # argparse names the program after sys.argv[0] (as do the warnings a
    # module gives as it is imported).
    command_line = sys.argv
    sys.argv = [prog, *chosen.arguments]
    try:
        module = importlib.import_module(module_name)
        cli.run(module.main, getattr(module, "INTERRUPTED", cli.INTERRUPTED), name=prog)
    finally:
        sys.argv = command_line
