"""Translating a whole file of real text, as users do: our `Translator` and
`examples/translate.py` against CTranslate2 float32 built from the same
weights by our exporter, side by side in one run.

    apt-get install trans-de-en          # the Ding dictionary
    pip install ".[ctranslate2]"
    python benchmarks/translate_file.py runs/small runs/base [--sentences 2000 --repeats 2]

The file: `--sentences` whole German sentences (4+ words ending in . ? or !)
of the Ding dictionary, evenly spread over it in dictionary order (mixed
lengths; most are in the runs' training split). For each run (a training
output folder) and each search (beam 4 and greedy; the model's alpha and
decode margin), float32:
- ours: `Translator.translate` in this process, warm (traced before
  timing), default batching; with `--batch-tokens` and `--in-flight`, also
  each of those budgets and numbers of batches in flight (to choose the
  defaults by measurement); with `--slots`, also continuous batching with
  each of those numbers of slots a search (`Translator(slots=...)`), and
  with `--batches`, batches searched to their end (`slots=None`);
- CTranslate2 float32 (`translate_batch` over SentencePiece pieces, as
  `benchmarks/ctranslate2_file.py` drives it, with the export's decoding
  settings) with `max_batch_size=32` sentences, and with
  `batch_type="tokens"`, `max_batch_size=--ct2-tokens`;
- whole processes, from start to written file, TensorFlow's import
  included: `examples/translate.py RUN --input FILE --output OUT` and
  `benchmarks/ctranslate2_file.py` (CTranslate2, `max_batch_size=32`).

With `--baseline CHECKOUT`, the warm searches of the package of that
checkout (the code before a change) are timed too, in a process of their
own that stays warm between its turns (its translations come back over a
pipe, a few milliseconds of a search's seconds), so that before and after
are measured in the same turns. The last lines give what beam search keeps
of greedy search's throughput (ours, the baseline's, CTranslate2's), in
target tokens a second and in the file's time: a weak model's greedy
outputs may repeat a word to the length limit where its beam's end, and
then the two searches write unequal numbers of tokens for the same file.

CTranslate2's OpenMP threads wait for work spinning; on a machine whose
cores other processes are using, that took it 70x as long here (40
sentences: 33 s against 0.5 s). `OMP_WAIT_POLICY=PASSIVE` in the
environment makes them sleep instead.

`--cold-start` times instead what a user waits for from the command line,
every process from its start, beam 4, in turns: `examples/translate.py
RUN` (what `keras-transformer translate` runs) and `ctranslate2_file.py`
on five of the sentences, until the first translation is written, and on
the whole file, until it is written; with `--baseline CHECKOUT`, also our
script of that checkout of the package (the code before a change). Then
it says where our process's time to the first translation goes, in one
more process for each checkout: Python's start, TensorFlow's import, our
modules' imports, loading the model and tokenizer, the first sentence
(tracing the search, then running it) and the next four.

Every contender is warmed up on the first 16 lines (our search traces
once for every batch shape), then timed in turns (each once, then again,
`--repeats` times; the median counts; `--no-processes` leaves out the two
processes), so that the ratios compare runs made at the same
time on a machine whose speed drifts. Target tokens are the SentencePiece
pieces of each contender's translations (one count rule for all); "same"
is the share of translations equal to our Translator's. oneDNN's
instruction set can be capped with ONEDNN_MAX_CPU_ISA=AVX2 (and
CTranslate2's with CT2_FORCE_CPU_ISA=AVX2) in the environment. Our
searches get the translate command's threads per operation
(`batch_defaults.share_cores`: the cores shared by the searches in
flight); TF_NUM_INTRAOP_THREADS in the environment overrides it.
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
# What a baseline checkout's processes start with: the user's environment,
# not the kernels and threads chosen below for ours.
USER_ENVIRONMENT = dict(os.environ)

import numpy as np  # noqa: E402

from common import machine, timed_interleaved  # noqa: E402
from keras_transformer.batch_defaults import (  # noqa: E402
    DEFAULT_IN_FLIGHT,
    decoding_kernels,
    share_cores,
)

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
SEARCHES = (("beam 4", 4), ("greedy", 1))


def ding_sentences(count, path=None):
    """`count` whole German sentences of Ding, evenly spread over it."""
    from keras_transformer.data.ding import DEFAULT_PATH, parse_line
    from keras_transformer.data.sentences import is_full_sentence

    seen, sentences = set(), []
    with open(path or DEFAULT_PATH, encoding="utf-8", errors="replace") as file:
        for line in file:
            for german, _ in parse_line(line):
                if is_full_sentence(german) and german not in seen:
                    seen.add(german)
                    sentences.append(german)
    if len(sentences) < count:
        raise ValueError(f"Ding has {len(sentences)} whole sentences, fewer than {count}.")
    return [sentences[i * len(sentences) // count] for i in range(count)]


def export_ctranslate2(run_dir, folder):
    """The run's model as a CTranslate2 float32 model in `folder`."""
    from keras_transformer import run_folder
    from keras_transformer.export import ctranslate2_model

    model, tokenizer = run_folder.load_model(run_dir), run_folder.load_tokenizer(run_dir)
    return ctranslate2_model.save(model, tokenizer, folder)


class _Run:
    """A contender: `run()` translates the file; `warm()` translates its
    first lines (tracing our search once; it serves every batch shape)."""

    def __init__(self, translate, lines):
        self.translate, self.lines = translate, lines

    def __call__(self):
        return self.translate(self.lines)

    def warm(self):
        self.translate(self.lines[:16])


WARM_BASELINE = """
import json, sys
from keras_transformer.batch_defaults import DEFAULT_IN_FLIGHT, share_cores
share_cores(DEFAULT_IN_FLIGHT)
from keras_transformer.decoding import Translator
translators = {}
for line in sys.stdin:
    beam, lines = json.loads(line)
    if beam not in translators:
        translators[beam] = Translator.from_directory(sys.argv[1], beam_size=beam)
    print(json.dumps(translators[beam].translate(lines)), flush=True)
"""


class _WarmBaseline:
    """The `Translator` of another checkout, in a process of its own that
    answers one JSON line (beam size, sentences) with their translations."""

    def __init__(self, checkout, run_dir):
        self.process = subprocess.Popen(
            [sys.executable, "-c", WARM_BASELINE, run_dir], stdin=subprocess.PIPE,
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
            env=_checkout_environment(checkout))

    def translate(self, beam, lines):
        self.process.stdin.write(json.dumps([beam, lines]) + "\n")
        self.process.stdin.flush()
        answer = self.process.stdout.readline()
        if not answer:
            raise RuntimeError("the baseline's process ended; run it alone to see why")
        return json.loads(answer)

    def close(self):
        self.process.stdin.close()
        self.process.wait()


def contenders(run_dir, folder, lines, files, ct2_tokens, processes=True, variants=(),
               baseline=None, slots=()):
    """name -> callable returning the translations, for one run;
    `variants` are extra `(batch_tokens, in_flight)` of our Translator,
    `slots` its numbers of slots (None: batches); `baseline` a
    `_WarmBaseline`."""
    import ctranslate2
    import sentencepiece

    sys.path.insert(0, HERE)
    from ctranslate2_file import translate as ct2_translate
    from keras_transformer.decoding import Translator
    from keras_transformer.textfiles import read_json

    tokenizer = sentencepiece.SentencePieceProcessor(
        model_file=os.path.join(folder, "tokenizer.model"))
    defaults = read_json(os.path.join(folder, "decoding.json"))
    ct2 = ctranslate2.Translator(folder, device="cpu", compute_type="float32")
    source, output = files

    def process(command):
        def run():
            subprocess.run(command, check=True, stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL)
            with open(output, encoding="utf-8") as file:
                return file.read().splitlines()
        return run

    runs = {}
    for search, beam in SEARCHES:
        translator = Translator.from_directory(run_dir, beam_size=beam)
        runs[f"{search}: ours, Translator"] = _Run(translator.translate, lines)
        if baseline is not None:
            runs[f"{search}: baseline, Translator"] = _Run(
                lambda lines, beam=beam: baseline.translate(beam, lines), lines)
        for tokens, in_flight in variants:
            variant = Translator(translator.model, translator.tokenizer, beam_size=beam,
                                 batch_tokens=tokens or None, in_flight=in_flight)
            runs[f"{search}: ours, {tokens or 'default'} tokens, {in_flight} in flight"] = _Run(
                variant.translate, lines)
        for count in slots:
            variant = Translator(translator.model, translator.tokenizer, beam_size=beam,
                                 slots=count)
            runs[f"{search}: ours, {count or 'no'} slots"] = _Run(variant.translate, lines)
        for batching, options in (("32 sentences", dict(max_batch_size=32)),
                                  (f"{ct2_tokens} tokens", dict(max_batch_size=ct2_tokens,
                                                                batch_type="tokens"))):
            runs[f"{search}: CTranslate2, {batching}"] = _Run(
                lambda lines, beam=beam, options=options: ct2_translate(
                    ct2, tokenizer, lines, beam, defaults, **options), lines)
        if not processes:
            continue
        runs[f"{search}: ours, translate.py process"] = process(
            [sys.executable, os.path.join(ROOT, "examples", "translate.py"), run_dir,
             "--input", source, "--output", output, "--overwrite", "--beam-size", str(beam)])
        runs[f"{search}: CTranslate2, script process"] = process(
            [sys.executable, os.path.join(HERE, "ctranslate2_file.py"), folder, source, output,
             str(beam)])
    return runs, tokenizer


def measure(run_dir, lines, args):
    """Times every contender of one run in turns; prints and returns the table rows."""
    with tempfile.TemporaryDirectory() as scratch:
        folder = export_ctranslate2(run_dir, os.path.join(scratch, "ctranslate2"))
        source, output = os.path.join(scratch, "source.de"), os.path.join(scratch, "output.en")
        with open(source, "w", encoding="utf-8") as file:
            file.write("".join(line + "\n" for line in lines))
        variants = [(tokens, in_flight) for tokens in args.batch_tokens or [0]
                    for in_flight in args.in_flight or [1] if (tokens, in_flight) != (0, 1)]
        baseline = args.baseline and _WarmBaseline(os.path.abspath(args.baseline), run_dir)
        try:
            slots = list(args.slots or []) + ([None] if args.batches else [])
            runs, tokenizer = contenders(run_dir, folder, lines, (source, output),
                                         args.ct2_tokens, args.processes, variants, baseline,
                                         slots)
            for name, run in runs.items():  # warm-up: our one trace serves every batch shape
                if "process" not in name:
                    run.warm()
            translations = {}

            def keeping(name, run):
                return lambda: translations.__setitem__(name, run())

            times = timed_interleaved({name: keeping(name, run) for name, run in runs.items()},
                                      warmup=0, repeats=args.repeats)
        finally:
            if baseline:
                baseline.close()
    rows = {}
    for name, seconds in times.items():
        search = name.split(":")[0]
        ours = translations[f"{search}: ours, Translator"]
        tokens = sum(len(tokenizer.encode(t)) for t in translations[name])
        same = np.mean([a == b for a, b in zip(translations[name], ours)])
        rows[name] = (seconds, tokens / seconds, same)
    print(f"\n{run_dir}: {len(lines)} sentences, {sum(len(tokenizer.encode(s)) for s in lines):,} "
          f"source tokens\n{'':44s} {'seconds':>8s} {'tokens/s':>9s} {'same':>6s}")
    for name, (seconds, rate, same) in rows.items():
        print(f"{name:44s} {seconds:8.1f} {rate:9.0f} {same:6.1%}")
    whose = ("ours", "baseline") if args.baseline else ("ours",)

    def fastest_ctranslate2(search):  # its faster batching's row
        return max((rows[n] for n in rows if n.startswith(f"{search}: CTranslate2,")
                    and "process" not in n), key=lambda row: row[1])

    for search, _ in SEARCHES:
        best_ct2 = fastest_ctranslate2(search)[1]
        ratio = "; ".join(f"{search}: {who} Translator / CTranslate2 (its faster batching) "
                          f"{rows[f'{search}: {who}, Translator'][1] / best_ct2:.2f}x in tokens/s"
                          for who in whose)
        if args.processes:
            process = {who: rows[f"{search}: {who} process"][0]
                       for who in ("ours, translate.py", "CTranslate2, script")}
            ratio += (f"; translate.py / CTranslate2 script "
                      f"{process['ours, translate.py'] / process['CTranslate2, script']:.2f}x in time")
        print(ratio)
    # What beam search keeps of greedy search's throughput, in target
    # tokens a second and in the file's time (sentences a second): where
    # greedy search's outputs run on (a weak model repeating a word to the
    # length limit) and the beam's end, the two searches write unequal
    # numbers of tokens for the same file.
    beam, greedy = (search for search, _ in SEARCHES)
    for who in whose + ("CTranslate2",):
        pair = [fastest_ctranslate2(search) if who == "CTranslate2"
                else rows[f"{search}: {who}, Translator"] for search in (beam, greedy)]
        print(f"{who}: {beam} / {greedy} {pair[0][1] / pair[1][1]:.2f}x in tokens/s, "
              f"{pair[1][0] / pair[0][0]:.2f}x in the file's time")
    return rows


def _first_line_seconds(command, environment):
    """Seconds from starting `command` to the first line on its standard
    output (then it is left to finish)."""
    started = time.perf_counter()
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                               env=environment, text=True)
    process.stdout.readline()
    seconds = time.perf_counter() - started
    process.communicate()
    if process.returncode:
        raise RuntimeError(f"{command} failed")
    return seconds


def _checkout_environment(checkout):
    """The environment of a process that runs the package of `checkout`."""
    return dict(USER_ENVIRONMENT, PYTHONPATH=os.pathsep.join([checkout, HERE]))


def cold_start(run_dir, lines, args):
    """The `--cold-start` table: each process in turns, `--repeats` times."""
    checkouts = {"ours": ROOT} | ({"ours, baseline": os.path.abspath(args.baseline)}
                                 if args.baseline else {})
    with tempfile.TemporaryDirectory() as scratch:
        folder = export_ctranslate2(run_dir, os.path.join(scratch, "ctranslate2"))
        files = {}
        for name, chosen in (("five", lines[::len(lines) // 5][:5]), ("file", lines)):
            files[name] = os.path.join(scratch, f"{name}.de")
            with open(files[name], "w", encoding="utf-8") as file:
                file.write("".join(line + "\n" for line in chosen))
        output = os.path.join(scratch, "output.en")
        runs = {}
        for who, checkout in checkouts.items():
            script = [sys.executable, os.path.join(checkout, "examples", "translate.py"), run_dir,
                      "--beam-size", "4"]
            environment = _checkout_environment(checkout)
            runs[f"{who}: first of five"] = lambda script=script, environment=environment: (
                _first_line_seconds(script + ["--input", files["five"]], environment))
            runs[f"{who}: whole file"] = lambda script=script, environment=environment: (
                subprocess.run(script + ["--input", files["file"], "--output", output,
                                         "--overwrite"], check=True, env=environment,
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        ct2 = [sys.executable, os.path.join(HERE, "ctranslate2_file.py"), folder]
        runs["CTranslate2 script: first of five"] = lambda: _first_line_seconds(
            ct2 + [files["five"], "/dev/stdout", "4"], os.environ)
        runs["CTranslate2 script: whole file"] = lambda: subprocess.run(
            ct2 + [files["file"], output, "4"], check=True, stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL)
        seconds = {name: [] for name in runs}
        for _ in range(args.repeats):
            for name, run in runs.items():
                started = time.perf_counter()
                first = run()
                seconds[name].append(first if isinstance(first, float)
                                     else time.perf_counter() - started)
        phases = {who: _phases(checkout, run_dir, files["five"])
                  for who, checkout in checkouts.items()}
    times = {name: float(np.median(values)) for name, values in seconds.items()}
    print(f"\n{run_dir}: cold start, beam 4, {len(lines)} sentences in the whole file, median of "
          f"{args.repeats} turns")
    for name, value in times.items():
        print(f"{name:40s} {value:6.1f} s")
    for what in ("first of five", "whole file"):
        for who in checkouts:
            print(f"{who} / CTranslate2's script, {what}: "
                  f"{times[f'{who}: {what}'] / times[f'CTranslate2 script: {what}']:.2f}x")
    for who, marks in phases.items():
        print(f"{who}, where the time to the first translation goes (one process; its CPU "
              "time beside):")
        for name, value, cpu in marks:
            print(f"  {name:46s} {value:5.2f} s {cpu:5.2f} s")
    return times


PHASES = """
import sys, time
marks = [("Python's start", time.time(), time.process_time())]
try:
    from keras_transformer.startup import tensorflow_start
except ImportError:  # a checkout from before it
    from contextlib import nullcontext as tensorflow_start
from keras_transformer import cli
cli.use_tensorflow_backend()
with tensorflow_start():
    import tensorflow
    marks.append(("TensorFlow's import", time.time(), time.process_time()))
    from keras_transformer.batch_defaults import share_cores
    share_cores()
    from keras_transformer.decoding import Translator
    marks.append(("our modules' imports", time.time(), time.process_time()))
    translator = Translator.from_directory(sys.argv[1], beam_size=4)
    marks.append(("loading the model and tokenizer", time.time(), time.process_time()))
    lines = open(sys.argv[2], encoding="utf-8").read().splitlines()
    translator.translate(lines[:1])
    marks.append(("the first sentence (tracing, then the search)", time.time(),
                  time.process_time()))
    translator.translate(lines[1:])
    marks.append(("the next four", time.time(), time.process_time()))
for name, at, cpu in marks:
    print(name, at, cpu, sep="\t")
"""


def _phases(checkout, run_dir, five):
    """`(phase, seconds, CPU seconds)` of a process translating `five` as
    the translate command does, from the process's start (here, before it
    is started; CPU seconds, of all its threads, from its first line)."""
    started = time.time()
    done = subprocess.run([sys.executable, "-c", PHASES, run_dir, five], check=True,
                          capture_output=True, text=True, env=_checkout_environment(checkout))
    marks, last, last_cpu = [], started, 0.0
    for line in done.stdout.splitlines():
        name, at, cpu = line.split("\t")
        marks.append((name, float(at) - last, float(cpu) - last_cpu))
        last, last_cpu = float(at), float(cpu)
    return marks + [("in all", last - started, last_cpu)]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("runs", nargs="+", help="training output folders (averaged.keras)")
    parser.add_argument("--sentences", type=int, default=2000)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--no-processes", dest="processes", action="store_false",
                        help="time only the in-process contenders (quicker)")
    parser.add_argument("--ct2-tokens", type=int, default=2048,
                        help="CTranslate2's max_batch_size with batch_type='tokens'")
    parser.add_argument("--batch-tokens", type=int, nargs="+",
                        help="also time our Translator with each of these budgets")
    parser.add_argument("--in-flight", type=int, nargs="+",
                        help="also time our Translator with this many batches in flight")
    parser.add_argument("--slots", type=int, nargs="+",
                        help="also time our Translator with continuous batching, each of these "
                        "numbers of slots a search")
    parser.add_argument("--batches", action="store_true",
                        help="also time our Translator with batches searched to their end")
    parser.add_argument("--cold-start", action="store_true",
                        help="time whole processes from their start instead (see above)")
    parser.add_argument("--baseline", metavar="CHECKOUT",
                        help="also time the package of this checkout (warm searches, or "
                        "with --cold-start its processes)")
    args = parser.parse_args()
    # As the translate command does: its searches in flight share the cores
    # (TF_NUM_INTRAOP_THREADS in the environment overrides it), on Eigen's
    # kernels unless TF_ENABLE_ONEDNN_OPTS says otherwise.
    threads = share_cores(DEFAULT_IN_FLIGHT)
    kernels = "Eigen" if decoding_kernels() else "oneDNN"
    lines = ding_sentences(args.sentences)
    isa = os.environ.get("ONEDNN_MAX_CPU_ISA", "not capped")
    print(f"Machine: {machine()}; TensorFlow's kernels: {kernels} (oneDNN ISA: {isa}); "
          f"threads per operation: {threads}; {time.strftime('%Y-%m-%d %H:%M')}")
    for run_dir in args.runs:
        (cold_start if args.cold_start else measure)(run_dir, lines, args)


if __name__ == "__main__":
    main()
