"""prepare_data.py's pipeline with two local worker processes against one,
side by side in turns.

    apt-get install trans-de-en            # the Ding dictionary
    pip install -e ".[beam]"
    python benchmarks/prepare_workers.py [--work /tmp/corpus-bench] [--repeats 2]

Each job prepares all of Ding's training pairs (about 372,000) with the
8,000-piece tokenizer in --work (trained there on first use), max_length 64,
8 shards read in 8 parts, on Beam's FnApiRunner with
`--direct_running_mode=multi_processing` and `--direct_num_workers` 1 or 2,
and writes a fresh folder. Each turn also runs each job on a corpus of one
pair a shard (a local folder of 8 training and 1 held-out pairs): its
start-up (starting the worker processes, which import TensorFlow, and the
runner's stages), which a paper-scale corpus (WMT14 En-De: 4.5 million
pairs, 12 times Ding) pays once. Figures: pairs a second of the whole job
(starting the workers to dataset.json) and after start-up (the pairs over
the time beyond the tiny job's), the median over --repeats turns, with the
CPU time the job took (this process and its worker processes) over its
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
    args = parser.parse_args()

    tokenizer_dir, _ = ding_work_folder(args.work)
    from keras_transformer import data
    from keras_transformer.pipelines.prepare_data import prepare_data

    tokenizer = data.load_tokenizer(tokenizer_dir)
    corpora = {"ding": data.corpus("ding"), "tiny": data.corpus(_tiny_corpus(args.work))}
    seconds = {(workers, name): [] for workers in args.workers for name in corpora}
    cores = {workers: [] for workers in args.workers}
    pairs = None
    for turn in range(args.repeats):
        for workers in args.workers:
            for name, corpus in corpora.items():
                output = os.path.join(args.work, f"prepared-{workers}-workers-{name}")
                shutil.rmtree(output, ignore_errors=True)
                start, cpu = time.perf_counter(), _cpu_seconds()
                info = prepare_data(corpus, tokenizer, output, 8, 64, parts=8, beam_args=[
                    "--direct_running_mode=multi_processing", f"--direct_num_workers={workers}"])
                took = time.perf_counter() - start
                seconds[workers, name].append(took)
                shutil.rmtree(output)
                if name == "ding":
                    cores[workers].append((_cpu_seconds() - cpu) / took)
                    pairs = info["train"]["kept"] + info["train"]["dropped"]
                    print(f"turn {turn + 1}: {workers} worker(s): {pairs:,} pairs in {took:.1f} s, "
                          f"{pairs / took:,.0f} pairs/s, {cores[workers][-1]:.2f} cores",
                          flush=True)
                else:
                    print(f"turn {turn + 1}: {workers} worker(s): start-up {took:.1f} s", flush=True)
    print(f"\n{machine()}; median of {args.repeats} turns\n")
    print("| prepare_data.py on Ding | pairs/s | x | start-up s | pairs/s after start-up | x | "
          "cores used |\n|---|---|---|---|---|---|---|")
    rates = {}
    for workers in args.workers:
        whole, once = (float(np.median(seconds[workers, name])) for name in corpora)
        rates[workers] = pairs / whole, pairs / (whole - once), once
    (base, base_steady, _) = rates[args.workers[0]]
    for workers, (rate, steady, once) in rates.items():
        print(f"| {workers} worker process(es) | {rate:,.0f} | {rate / base:.2f} | {once:.1f} | "
              f"{steady:,.0f} | {steady / base_steady:.2f} | {np.median(cores[workers]):.2f} |")


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


def _cpu_seconds():
    """CPU time of this process and of its finished child processes (the
    FnApiRunner's workers end with the job)."""
    own, children = (resource.getrusage(who) for who in (resource.RUSAGE_SELF,
                                                         resource.RUSAGE_CHILDREN))
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


if __name__ == "__main__":
    main()
