"""A command module in the shape `keras_transformer.commands` runs (a
`main()` that parses the command line), for the tests of that runner: it
prints its words, or warns or fails as asked."""

import argparse

from keras_transformer import cli

INTERRUPTED = "the echo was cut short"


def main():
    p = argparse.ArgumentParser(description="Prints its words.")
    p.add_argument("words", nargs="*")
    p.add_argument("--times", type=cli.positive_int, default=1)
    p.add_argument("--fail", choices=("value", "interrupt", "warn"))
    args = p.parse_args()
    if args.fail == "value":
        raise ValueError("the words\n  were wrong")
    if args.fail == "interrupt":
        raise KeyboardInterrupt
    if args.fail == "warn":
        cli.warn("a word was changed")
    print(" ".join(args.words * args.times))
