"""prepare_data.py's pipeline with two local worker processes against one,
side by side in turns.

    apt-get install trans-de-en            # the Ding dictionary
    pip install -e ".[beam]"
    python benchmarks/prepare_workers.py [--work /tmp/corpus-bench] [--repeats 2]

Each job prepares all of Ding's training pairs (about 372,000) with the
8,000-piece tokenizer in --work (trained there on first use), max_length 64,
8 shards read in 8 parts, on Beam's FnApiRunner with
`--direct_running_mode=multi_processing` and `--direct_num_workers` 1 or 2,
and writes a fresh folder. The figure is pairs a second of the whole job
(starting the workers to dataset.json), the median over --repeats turns,
with the CPU time the job took (this process and its worker processes) over
its wall time: the cores it had on average, which on a shared machine says
how far the second worker could run beside the first.
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

    corpus = data.corpus("ding")
    tokenizer = data.load_tokenizer(tokenizer_dir)
    rates = {workers: [] for workers in args.workers}
    cores = {workers: [] for workers in args.workers}
    for turn in range(args.repeats):
        for workers in args.workers:
            output = os.path.join(args.work, f"prepared-{workers}-workers")
            shutil.rmtree(output, ignore_errors=True)
            start, cpu = time.perf_counter(), _cpu_seconds()
            info = prepare_data(corpus, tokenizer, output, 8, 64, parts=8, beam_args=[
                "--direct_running_mode=multi_processing", f"--direct_num_workers={workers}"])
            seconds = time.perf_counter() - start
            cores[workers].append((_cpu_seconds() - cpu) / seconds)
            pairs = info["train"]["kept"] + info["train"]["dropped"]
            rates[workers].append(pairs / seconds)
            print(f"turn {turn + 1}: {workers} worker(s): {pairs:,} pairs in {seconds:.1f} s, "
                  f"{rates[workers][-1]:,.0f} pairs/s, {cores[workers][-1]:.2f} cores", flush=True)
            shutil.rmtree(output)
    medians = {workers: float(np.median(values)) for workers, values in rates.items()}
    baseline = medians[args.workers[0]]
    print(f"\n{machine()}; median of {args.repeats} turns\n")
    print("| prepare_data.py on Ding | pairs/s | x | cores used |\n|---|---|---|---|")
    for workers, rate in medians.items():
        print(f"| {workers} worker process(es) | {rate:,.0f} | {rate / baseline:.2f} | "
              f"{np.median(cores[workers]):.2f} |")


def _cpu_seconds():
    """CPU time of this process and of its finished child processes (the
    FnApiRunner's workers end with the job)."""
    own, children = (resource.getrusage(who) for who in (resource.RUSAGE_SELF,
                                                         resource.RUSAGE_CHILDREN))
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


if __name__ == "__main__":
    main()
