"""What every command (the installed `keras-transformer`, and the scripts in
`examples/` and `export/`) does with bad input: a one-line error and
exit status 1 (argparse's usage errors: 2), warnings as one line each on
standard error, and on Ctrl-C a one-line note and exit status 130. Plain
Python: a command can check its arguments and files before it imports
TensorFlow.

    if __name__ == "__main__":
        cli.run(main)
"""

import argparse
import math
import os
import sys
import warnings

from keras_transformer import startup
from keras_transformer.names import DECODING_PRECISIONS
from keras_transformer.textfiles import describe_lines

INTERRUPTED = "nothing was written; earlier output is unchanged"
# The note of the commands that checkpoint as they go (train, demo).
RESUMABLE = "run the same command again to resume from the last checkpoint"

# The name `run` was given, for the length of that run (see `program`).
_program = None


def program():
    """The name every error, warning and note starts with: the one given to
    `run` (`keras-transformer translate` under the installed command), else
    the script's file name (`translate.py`)."""
    return _program or os.path.basename(sys.argv[0]) or "keras_transformer"


def one_line(error):
    """An exception's message on one line."""
    return " ".join(str(error).split()) or type(error).__name__


def warn(message):
    """Prints `PROGRAM: warning: MESSAGE` on standard error (below a
    progress line being drawn)."""
    Progress.end_line()
    print(f"{program()}: warning: {one_line(message)}", file=sys.stderr, flush=True)


def overlong_lines(name, numbers, limit, refuse):
    """Input lines (1-based `numbers` of the file `name`) longer than the
    model's `limit` tokens: raises a ValueError naming them when `refuse`,
    else warns that they were cut."""
    if not numbers:
        return
    lines = f"{name}: {describe_lines(numbers)} exceeded the model's {limit} tokens"
    if refuse:
        raise ValueError(f"{lines}; shorten or split them, or leave out --overlong error to cut "
                         "them.")
    warn(f"{lines}; only their first {limit} tokens were translated.")


def use_tensorflow_backend():
    """Puts this process on Keras' TensorFlow backend, for the commands that
    read and write TensorFlow graphs (every command but `train`, which runs
    on any backend): where KERAS_BACKEND or keras.json name another (set for
    training on JAX, say), KERAS_BACKEND is set to tensorflow, with a warning
    naming the change. Must run before Keras is imported; where Keras already
    runs on another backend, a one-line error says so."""
    if "keras" in sys.modules:
        backend = sys.modules["keras"].backend.backend()
        if backend != "tensorflow":
            raise ValueError(f"this command runs on Keras' TensorFlow backend, and this process "
                             f"already runs Keras on {backend}; run it in its own process.")
        return
    chosen = startup.keras_backend()
    os.environ["KERAS_BACKEND"] = "tensorflow"
    if chosen and chosen != "tensorflow":
        warn(f"this command runs on TensorFlow; the Keras backend {chosen} (KERAS_BACKEND or "
             "keras.json) was set to tensorflow for it (train alone runs on other backends).")


def _show_warning(message, category, filename, lineno, file=None, line=None):
    warn(message)


def run(main, interrupted=INTERRUPTED, name=None):
    """Calls `main()` with the package's rules for errors and interruption.

    ValueError, OSError (missing files, FileExistsError, ...) and ImportError
    are the errors bad input raises in this package; they end the command
    with `PROGRAM: error: MESSAGE` on one line. Ctrl-C ends it with
    `PROGRAM: interrupted; <interrupted>` and status 130. Python warnings
    print as `PROGRAM: warning: MESSAGE`. PROGRAM is `name` when given (a
    subcommand of the installed command), else the script's file name.
    The libraries' own lines are held back (`startup`; the commands'
    `--verbose` shows them).
    """
    global _program
    warnings.showwarning = _show_warning
    _program = name
    try:
        with startup.tensorflow_start():
            main()
    except KeyboardInterrupt:
        print(f"\n{program()}: interrupted; {interrupted}", file=sys.stderr, flush=True)
        sys.exit(130)
    except BrokenPipeError:
        # The reader of standard output went away (`... | head`): stop quietly.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        sys.exit(1)
    except (ValueError, OSError, ImportError) as error:
        print(f"{program()}: error: {one_line(error)}", file=sys.stderr, flush=True)
        sys.exit(1)
    finally:
        _program = None


class _Verbose(argparse.Action):
    """`--verbose`: takes effect as it is parsed, before the command
    imports TensorFlow."""

    def __init__(self, option_strings, dest, **kwargs):
        super().__init__(option_strings, dest, nargs=0, default=False, **kwargs)

    def __call__(self, parser, namespace, values, option_string=None):
        startup.verbose()
        setattr(namespace, self.dest, True)


def add_verbose_argument(parser):
    """`--verbose` of every command: the libraries' own lines as they write
    them (see `startup`)."""
    parser.add_argument("--verbose", action=_Verbose,
                        help="show the libraries' own lines (TensorFlow's start-up and C++ log, "
                             "absl's, TensorFlow's and Apache Beam's Python logs, TFDS's "
                             "progress bars), which are held back whatever TF_CPP_MIN_LOG_LEVEL "
                             "says")


class HelpFormatter(argparse.HelpFormatter):
    """`--help` that gives each option's default after what it does, where
    the option has one and its help does not already say it (argparse's
    ArgumentDefaultsHelpFormatter also prints `(default: None)` or `[]` and
    repeats the defaults a help text spells out)."""

    def _get_help_string(self, action):
        help = action.help or ""
        # `is`, not `in`: a default of 0 equals False and is still shown.
        if (any(action.default is nothing for nothing in (None, False, argparse.SUPPRESS))
                or action.default == []  # a repeatable option given no times
                or "default" in help
                or not action.option_strings):
            return help
        return f"{help} (default: %(default)s)".lstrip()


def _number(kind, lowest, text, inclusive):
    try:
        value = kind(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"expected a finite number, got {text!r}")
    if value < lowest or (value == lowest and not inclusive):
        relation = ">=" if inclusive else ">"
        raise argparse.ArgumentTypeError(f"must be {relation} {lowest}, got {text}")
    return value


def positive_int(text):
    """argparse type: an integer >= 1."""
    return _number(int, 1, text, inclusive=True)


def non_negative_int(text):
    """argparse type: an integer >= 0."""
    return _number(int, 0, text, inclusive=True)


def positive_float(text):
    """argparse type: a number > 0."""
    return _number(float, 0.0, text, inclusive=False)


def non_negative_float(text):
    """argparse type: a number >= 0."""
    return _number(float, 0.0, text, inclusive=True)


def fraction(text):
    """argparse type: a number >= 0 and < 1."""
    value = _number(float, 0.0, text, inclusive=True)
    if value >= 1:
        raise argparse.ArgumentTypeError(f"must be < 1, got {text}")
    return value


def add_precision_argument(parser, help="decode in this precision (default: the model's "
                                         "own): bfloat16 is faster on CPUs with AVX-512 BF16 or "
                                         "AMX, float16 is for GPUs"):
    """`--precision` of the commands that decode (see `models.in_precision`)."""
    parser.add_argument("--precision", choices=DECODING_PRECISIONS, help=help)


def add_search_arguments(parser, beam_help="beam width; 1 is greedy search"):
    """`--beam-size`, `--alpha`, `--decode-margin` of the commands that
    translate (None: the model's own, as `runtimes.Decoding` resolves it)."""
    parser.add_argument("--beam-size", type=positive_int,
                        help=f"{beam_help} (default: the model's, 4)")
    parser.add_argument("--alpha", type=non_negative_float,
                        help="length penalty (default: the model's, 0.6 unless its run "
                             "chose another)")
    parser.add_argument("--decode-margin", type=non_negative_int,
                        help="translations end within the input's length + this many tokens "
                             "(default: the model's, 50)")


def add_guard_argument(parser):
    """`--no-guard` of the commands that translate with the keras runtime
    (`decoding.Translator`'s `guard`)."""
    parser.add_argument("--no-guard", dest="guard", action="store_false",
                        help="give translations that loop or run away as the search found "
                             "them, instead of searching them again with their repeated "
                             "n-grams banned (docs/trust.md)")


def add_sampling_arguments(parser):
    """`--sampling-topk`, `--sampling-temperature`, `--seed` of the commands
    that translate (see `decoding.Sampling`); `check_sampling` checks them."""
    group = parser.add_argument_group("sampling, for back-translation")
    group.add_argument("--sampling-topk", type=non_negative_int, metavar="K",
                       help="draw each translation from the model's distribution instead of "
                            "beam search: from the K most likely tokens, 0 for all of them "
                            "(Edunov et al. 2018); 1 is greedy search (default: beam search)")
    group.add_argument("--sampling-temperature", type=positive_float, default=1.0, metavar="T",
                       help="divide the log-probabilities by T before drawing")
    group.add_argument("--seed", type=int, default=0,
                       help="the same seed and input give the same draws")


def check_sampling(parser, args):
    """Stops with a usage error for sampling options that cannot go together."""
    if args.sampling_topk is None:
        if args.sampling_temperature != 1.0 or args.seed != 0:
            parser.error("--sampling-temperature and --seed need --sampling-topk")
    elif args.beam_size is not None:
        parser.error("--sampling-topk draws one translation; leave out --beam-size")


class Progress:
    """A progress line on standard error, redrawn in place at most every
    `interval` seconds: lines done (of `total`, when known), target tokens
    per second, and the time left. Only when standard error is a terminal
    (a log file would fill with redrawn lines)."""

    def __init__(self, total=None, interval=0.5, stream=None):
        import time

        self._clock = time.monotonic
        self.total, self.interval = total, interval
        self.stream = sys.stderr if stream is None else stream
        self.shown = self.stream.isatty()
        self.lines = self.tokens = 0
        self.started = self._last = self._clock()

    def update(self, lines, tokens):
        """Counts `lines` more translated, with `tokens` target tokens."""
        self.lines += lines
        self.tokens += tokens
        if self.shown and self._clock() - self._last >= self.interval:
            self._draw()

    def text(self):
        """The progress line."""
        seconds = max(self._clock() - self.started, 1e-9)
        done = f"{self.lines:,}" + (f"/{self.total:,}" if self.total else "")
        text = f"{program()}: {done} lines, {self.tokens / seconds:,.0f} tokens/s"
        if self.total and self.lines:
            left = seconds * (self.total - self.lines) / self.lines
            text += f", {int(left // 60)}:{int(left % 60):02d} left"
        return text

    _drawn = None  # the stream of a progress line not yet ended

    def _draw(self):
        self._last = self._clock()
        print(f"\r{self.text()}\033[K", end="", file=self.stream, flush=True)
        Progress._drawn = self.stream

    @staticmethod
    def end_line():
        """Ends a progress line being drawn, so that a message goes below it."""
        if Progress._drawn is not None:
            print(file=Progress._drawn, flush=True)
            Progress._drawn = None

    def close(self):
        """Draws the final count and ends the line."""
        if self.shown:
            self._draw()
            Progress.end_line()
