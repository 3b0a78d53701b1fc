"""prepare_data.py's pipeline with two local worker processes against one,
side by side in turns.

    apt-get install trans-de-en            # the Ding dictionary
    pip install -e ".[beam]"
    python benchmarks/prepare_workers.py [--work /tmp/corpus-bench] [--repeats 2] [--copies 12]

Each job prepares all training pairs of a corpus with the 8,000-piece
tokenizer in --work (trained there on first use), max_length 64, 8 shards
read in 8 parts, on Beam's FnApiRunner with
`--direct_running_mode=multi_processing` and `--direct_num_workers` 1 or 2,
and writes a fresh folder. The corpora: Ding (about 372,000 pairs), and
Ding's dictionary file repeated --copies times (12: 4.5 million pairs, the
size of WMT14 En-De, the paper's corpus; made into a TFDS dataset in --work
on first use, a few minutes; 0 leaves it out), whose job a paper-scale
corpus is like. Each turn also runs each job on a corpus of one pair a
shard (a local folder of 8 training and 1 held-out pairs): its start-up
(starting the worker processes, which import TensorFlow, and the runner's
stages), which every job pays once. Figures: pairs a second of the whole
job (starting the workers to dataset.json) and after start-up (the pairs
over the time beyond the tiny job's), the median over --repeats turns, with
the CPU time the job took (this process and its worker processes) over its
wall time: the cores it had on average, which on a shared machine says how
far the second worker could run beside the first.
"""

import argparse
import os
import resource
import shutil
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402

from common import ding_work_folder, machine  # noqa: E402


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--work", default="/tmp/corpus-bench", help="tokenizer and outputs")
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--copies", type=int, default=12,
                        help="Ding repeated this many times as a second corpus (0: none)")
    args = parser.parse_args()

    tokenizer_dir, _ = ding_work_folder(args.work)
    from keras_transformer import data, run_folder
    from keras_transformer.pipelines.prepare_data import prepare_data

    tokenizer = run_folder.load_tokenizer(tokenizer_dir)
    corpora = {"tiny": data.corpus(_tiny_corpus(args.work)), "Ding": data.corpus("ding")}
    if args.copies:
        corpora[f"Ding x{args.copies}"] = _repeated_ding(args.work, args.copies)
    seconds = {(workers, name): [] for workers in args.workers for name in corpora}
    cores = {(workers, name): [] for workers in args.workers for name in corpora}
    pairs = {}
    for turn in range(args.repeats):
        for name, corpus in corpora.items():
            for workers in args.workers:
                output = os.path.join(args.work, f"prepared-{workers}-workers")
                shutil.rmtree(output, ignore_errors=True)
                start, cpu = time.perf_counter(), _cpu_seconds()
                info = prepare_data(corpus, tokenizer, output, 8, 64, parts=8, beam_args=[
                    "--direct_running_mode=multi_processing", f"--direct_num_workers={workers}"])
                took = time.perf_counter() - start
                seconds[workers, name].append(took)
                cores[workers, name].append((_cpu_seconds() - cpu) / took)
                shutil.rmtree(output)
                pairs[name] = info["train"]["kept"] + info["train"]["dropped"]
                print(f"turn {turn + 1}: {name}, {workers} worker(s): {pairs[name]:,} pairs in "
                      f"{took:.1f} s, {cores[workers, name][-1]:.2f} cores", flush=True)
    print(f"\n{machine()}; median of {args.repeats} turns\n")
    print("| prepare_data.py | pairs/s | x | start-up s | pairs/s after start-up | x | "
          "cores used |\n|---|---|---|---|---|---|---|")
    for name in list(corpora)[1:]:
        rates = {}
        for workers in args.workers:
            whole, once = (float(np.median(seconds[workers, job])) for job in (name, "tiny"))
            rates[workers] = pairs[name] / whole, pairs[name] / (whole - once), once
        (base, base_steady, _) = rates[args.workers[0]]
        for workers, (rate, steady, once) in rates.items():
            print(f"| {name} ({pairs[name]:,} pairs), {workers} worker process(es) | {rate:,.0f} | "
                  f"{rate / base:.2f} | {once:.1f} | {steady:,.0f} | {steady / base_steady:.2f} | "
                  f"{np.median(cores[workers, name]):.2f} |")


def _tiny_corpus(work):
    """A local corpus folder of one training pair a shard and one held-out
    pair a split, in `work`: its job is the pipeline's start-up alone."""
    folder = os.path.join(work, "tiny-corpus")
    os.makedirs(folder, exist_ok=True)
    for split, count in (("train", 8), ("validation", 1), ("test", 1)):
        with open(os.path.join(folder, f"{split}.tsv"), "w", encoding="utf-8") as file:
            file.writelines(f"Guten Morgen {index}.\tGood morning {index}.\n"
                            for index in range(count))
    return folder


def _repeated_ding(work, copies):
    """The Ding corpus of a dictionary file that holds Ding's `copies`
    times, as a TFDS dataset in `work` (prepared on first use)."""
    from keras_transformer import data
    from keras_transformer.data.ding import DEFAULT_PATH

    folder = os.path.join(work, f"ding-x{copies}")
    source = os.path.join(folder, "de-en")
    if not os.path.exists(source):
        os.makedirs(folder, exist_ok=True)
        with open(DEFAULT_PATH, "rb") as file:
            dictionary = file.read()
        with open(source + ".partial", "wb") as file:
            for _ in range(copies):
                file.write(dictionary)
        os.replace(source + ".partial", source)
    corpus = data.corpus("ding", data_dir=os.path.join(folder, "tfds"), ding_path=source)
    corpus.pairs("train")  # prepares the TFDS dataset
    return corpus


def _cpu_seconds():
    """CPU time of this process and of its finished child processes (the
    FnApiRunner's workers end with the job)."""
    own, children = (resource.getrusage(who) for who in (resource.RUSAGE_SELF,
                                                         resource.RUSAGE_CHILDREN))
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


if __name__ == "__main__":
    main()
