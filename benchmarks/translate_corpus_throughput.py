"""translate_corpus.py (Apache Beam, one machine) against translate.py on the
same file with the same settings, side by side in turns, and whether their
translations are identical.

    python examples/train.py --output runs/ding --preset small --dataset ding --steps 600
    pip install -e ".[beam]"
    python benchmarks/translate_corpus_throughput.py runs/ding [--lines 1000] [--repeats 2]

The input is the first --lines German sources of the run's test split (Ding:
words, phrases and sentences of mixed lengths), one file. Each contender is
the command a user runs, in its own process, timed from start to exit:
`examples/translate.py RUN --input FILE --output OUT` (the Translator on the
run's model, windows of 4,096 lines sorted by length, searches of 2,048
source tokens, two in flight) and `examples/translate_corpus.py EXPORT
--input FILE --output DIR` (the run exported by `export_run` into --work,
the SavedModel's `translate` signature under RunInference, each bundle
sorted by length, batches of two searches of the same budget run at once,
Beam's FnApiRunner in process); with --ctranslate2 also its CTranslate2
runtime. Beam 4, alpha 0.6, margin 50 (the model's defaults) for all.
Each turn also runs each command on the file's first line alone: its
start-up (imports, loading, tracing, the pipeline), which a corpus of
millions of lines pays once. Beam's RunInference also imports PyTorch where
it is installed (the test environment has it): run this in a user's
environment, `pip install -e ".[beam]"`, to time what a user waits for.
Figures: lines a second from start to exit, and after start-up (the lines
but the first over the time beyond the one-line run's), the median over
--repeats turns.
"""

import argparse
import importlib.util
import os
import subprocess
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402

from common import machine  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def command(script, *args):
    start = time.perf_counter()
    subprocess.run([sys.executable, os.path.join(ROOT, script), *map(str, args)], check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - start


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run_dir", help="a trained run (examples/train.py)")
    parser.add_argument("--work", default="/tmp/translate-bench", help="export, input, outputs")
    parser.add_argument("--lines", type=int, default=1000)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--ctranslate2", action="store_true", help="also the CTranslate2 runtime")
    args = parser.parse_args()
    args.work = os.path.abspath(args.work)

    from keras_transformer.evaluation import run_corpus
    from keras_transformer.export import export_run
    from keras_transformer.pipelines.translate_corpus import read_translations
    from keras_transformer.textfiles import clean_text, read_lines, write_lines

    os.makedirs(args.work, exist_ok=True)
    export = os.path.join(args.work, "export")
    if not os.path.exists(export):
        export_run(args.run_dir, export,
                   formats=("saved_model", "ctranslate2") if args.ctranslate2 else ("saved_model",))
    source, first = os.path.join(args.work, "source.txt"), os.path.join(args.work, "first.txt")
    pairs = run_corpus(args.run_dir).pairs("test").take(args.lines).as_numpy_iterator()
    lines = [clean_text(s) for s, _ in pairs]
    write_lines(lines, source)
    write_lines(lines[:1], first)
    outputs = {"translate.py": os.path.join(args.work, "translate.txt"),
               "translate_corpus.py": os.path.join(args.work, "corpus-saved_model")}
    commands = {
        "translate.py": lambda file, output: command(
            "examples/translate.py", args.run_dir, "--input", file, "--output", output,
            "--overwrite"),
        "translate_corpus.py": lambda file, output: command(
            "examples/translate_corpus.py", export, "--input", file, "--output", output,
            "--overwrite")}
    if args.ctranslate2:
        outputs["translate_corpus.py, ctranslate2"] = os.path.join(args.work, "corpus-ctranslate2")
        commands["translate_corpus.py, ctranslate2"] = lambda file, output: command(
            "examples/translate_corpus.py", export, "--input", file, "--output", output,
            "--overwrite", "--runtime", "ctranslate2")
    seconds = {name: [] for name in commands}
    start_up = {name: [] for name in commands}
    for turn in range(args.repeats):
        for name, run in commands.items():
            seconds[name].append(run(source, outputs[name]))
            start_up[name].append(run(first, outputs[name] + ".first"))
            print(f"turn {turn + 1}: {name}: {seconds[name][-1]:.1f} s, one line "
                  f"{start_up[name][-1]:.1f} s", flush=True)

    reference = read_lines(outputs["translate.py"]).lines
    # Beam's RunInference imports PyTorch where it is installed (for its
    # model manager), which lengthens translate_corpus.py's start-up.
    torch = "installed" if importlib.util.find_spec("torch") else "not installed"
    print(f"\n{machine()}; PyTorch {torch}; {len(reference)} lines, median of {args.repeats} "
          "turns\n")
    print("| command | lines/s | x | start-up s | lines/s after start-up | x | "
          "identical to translate.py |\n|---|---|---|---|---|---|---|")
    rates = {}
    for name in commands:
        whole, once = float(np.median(seconds[name])), float(np.median(start_up[name]))
        rates[name] = (len(reference) / whole, (len(reference) - 1) / (whole - once))
    for name in commands:
        if name == "translate.py":
            same = len(reference)
        else:
            got = read_translations(outputs[name])
            same = sum(got.get((source, n)) == t for n, t in enumerate(reference, start=1))
        (rate, steady), (base, base_steady) = rates[name], rates["translate.py"]
        print(f"| {name} | {rate:.1f} | {rate / base:.2f} | {np.median(start_up[name]):.1f} | "
              f"{steady:.1f} | {steady / base_steady:.2f} | {same} of {len(reference)} |")


if __name__ == "__main__":
    main()
