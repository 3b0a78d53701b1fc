"""Memory of `examples/translate.py` on files of different sizes: it reads,
translates and writes a window of lines at a time, so its peak resident
memory should not grow with the file.

    python benchmarks/translate_memory.py [--lines 10000 100000]

Each file repeats Ding's whole German sentences (`translate_file.py`'s) to
the given number of lines. The model is a tiny random one (2+2 layers,
d_model 32, outputs of at most 8 tokens, greedy search) with a SentencePiece
model trained on those sentences, so that a 100,000-line file translates in
minutes: the pipeline around the model (reading, batching, writing) is what
is measured. Reports each process's peak resident memory (`wait4`) and time.
"""

import argparse
import itertools
import os
import subprocess
import sys
import tempfile
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def tiny_run(folder, sentences):
    """A run folder: tokenizer and a tiny random model."""
    from keras_transformer.data import train_tokenizer
    from keras_transformer.models import BASE, transformer

    config = BASE.replace(num_encoder_layers=2, num_decoder_layers=2, d_model=32, d_ff=64,
                          num_heads=4, max_length=64, decode_margin=8)
    tokenizer = train_tokenizer(sentences, os.path.join(folder, "tokenizer.model"), vocab_size=500)
    transformer(config, tokenizer.vocab_size).save(os.path.join(folder, "model.keras"))
    with open(os.path.join(folder, "config.json"), "w", encoding="utf-8") as file:
        file.write(config.to_json())
    return folder


def peak_memory(command):
    """`(peak resident MiB, seconds)` of a command run to its end."""
    started = time.perf_counter()
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    _, status, usage = os.wait4(process.pid, 0)
    if os.waitstatus_to_exitcode(status):
        raise RuntimeError(f"{command} failed")
    return usage.ru_maxrss / 1024, time.perf_counter() - started


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lines", type=int, nargs="+", default=[10_000, 100_000])
    args = parser.parse_args()
    sys.path.insert(0, HERE)
    from translate_file import ding_sentences

    sentences = ding_sentences(2000)
    with tempfile.TemporaryDirectory() as scratch:
        run = tiny_run(scratch, sentences)
        print(f"{'lines':>9s} {'peak MiB':>9s} {'seconds':>8s}")
        for count in args.lines:
            source = os.path.join(scratch, f"{count}.de")
            with open(source, "w", encoding="utf-8") as file:
                file.writelines(line + "\n" for line in itertools.islice(
                    itertools.cycle(sentences), count))
            mib, seconds = peak_memory(
                [sys.executable, os.path.join(ROOT, "examples", "translate.py"), run,
                 "--input", source, "--output", source + ".en", "--beam-size", "1"])
            print(f"{count:9,d} {mib:9.0f} {seconds:8.0f}", flush=True)


if __name__ == "__main__":
    main()
