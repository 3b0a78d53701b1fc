"""Which kernels a search should run on this CPU: the whole `translate`
command on a file of Ding sentences, in float32 and bfloat16, with
TensorFlow's oneDNN kernels left to TensorFlow's default, turned off
(`TF_ENABLE_ONEDNN_OPTS=0`, Eigen's kernels) and turned on (`=1`), in
turns. What `batch_defaults.decoding_kernels` chooses rests on it.

    apt-get install trans-de-en          # the Ding dictionary
    python benchmarks/decoding_kernels.py runs/small [--sentences 400 --repeats 2]

Each cell is a process of `examples/translate.py RUN --input FILE --output
OUT --precision P` with the environment's setting of TF_ENABLE_ONEDNN_OPTS
(and the command's own choice where it is unset: for float32 it turns oneDNN
off), timed from start to written file, every cell once and then again
(`--repeats`); the median counts. Beside each time: target tokens a second,
the share of translations equal to the float32 default's, and whether
oneDNN ran (TensorFlow's own line, with --verbose). The first lines say
what this CPU has and what TensorFlow decides here by default
(`cpu_features.onednn_enabled`).
"""

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
sys.path.insert(0, ROOT)

SETTINGS = {"default": None, "off (0)": "0", "on (1)": "1"}


def run_translate(run, source, output, precision, setting):
    """`(seconds, oneDNN on, translations)` of one translate process."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("TF_ENABLE_ONEDNN_OPTS", "TF_CPP_MIN_LOG_LEVEL")}
    if setting is not None:
        env["TF_ENABLE_ONEDNN_OPTS"] = setting
    command = [sys.executable, os.path.join(ROOT, "examples", "translate.py"), run, "--input",
               source, "--output", output, "--overwrite", "--verbose", "--precision", precision]
    start = time.perf_counter()
    result = subprocess.run(command, capture_output=True, text=True, env=env, check=False)
    seconds = time.perf_counter() - start
    if result.returncode:
        raise RuntimeError(f"{' '.join(command)} failed:\n{result.stderr[-2000:]}")
    with open(output, encoding="utf-8") as file:
        translations = file.read().splitlines()
    return seconds, "oneDNN custom operations are on" in result.stderr, translations


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run", help="a trained run folder (German to English)")
    parser.add_argument("--sentences", type=int, default=400)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--precisions", nargs="+", default=["float32", "bfloat16"])
    args = parser.parse_args()

    from common import machine
    from keras_transformer import cpu_features, run_folder
    from translate_file import ding_sentences

    flags = cpu_features.cpu_flags()
    print(f"{machine()}; AVX-512: {'avx512f' in flags}; its neural-network features "
          f"{sorted(flags & cpu_features.ONEDNN_BY_DEFAULT) or 'none'}; oneDNN by TensorFlow's "
          f"default: {'on' if cpu_features.onednn_enabled() else 'off'}")
    pieces = run_folder.load_text_tokenizer(args.run)
    with tempfile.TemporaryDirectory() as work:
        source = os.path.join(work, "in.de")
        with open(source, "w", encoding="utf-8") as file:
            file.write("\n".join(ding_sentences(args.sentences)) + "\n")
        cells = [(precision, name) for precision in args.precisions for name in SETTINGS]
        times = {cell: [] for cell in cells}
        found = {}
        for repeat in range(args.repeats):
            for precision, name in cells:
                seconds, on, translations = run_translate(
                    args.run, source, os.path.join(work, "out.en"), precision, SETTINGS[name])
                times[precision, name].append(seconds)
                found[precision, name] = (on, translations)
        reference = found[args.precisions[0], "default"][1]
        print(f"{args.sentences} Ding sentences, the whole command, median of {args.repeats}:")
        for precision, name in cells:
            on, translations = found[precision, name]
            seconds = statistics.median(times[precision, name])
            tokens = sum(len(pieces.encode(line)) for line in translations)
            same = sum(a == b for a, b in zip(translations, reference)) / len(reference)
            print(f"  {precision:9} TF_ENABLE_ONEDNN_OPTS {name:9} oneDNN {'on ' if on else 'off'}"
                  f"  {seconds:6.1f} s  {tokens / seconds:7.0f} target tokens/s  "
                  f"{same:6.1%} the same as {args.precisions[0]}'s default")


if __name__ == "__main__":
    main()
