"""A training run from prepared shards against one from the raw corpus:
the same steps and seed give the same validation loss curve, within the
noise of another seed.

    apt-get install trans-de-en            # the Ding dictionary
    pip install -e ".[beam]"
    python benchmarks/prepared_training.py [--work /tmp/corpus-bench] [--steps 600] \
        [--set FIELD=VALUE ...]

Three runs of `examples/train.py` with the small preset on Ding, the same
8,000-piece tokenizer (trained into --work on first use, with the shards
`prepare_data.py` makes of Ding with it), --steps updates, the validation
loss every --eval-every steps: from the raw corpus with seed 1234; from the
shards with seed 1234; from the raw corpus with seed 1235, whose distance
from the first is the noise a seed makes (another initialization and another
order of the data; the shards' order differs from the raw corpus' too).
Prints the curves and the largest differences. --set passes config
overrides to every run (a smaller model where the machine is slow).
"""

import argparse
import json
import os
import shutil
import subprocess
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from common import ding_work_folder, machine  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def train(output, tokenizer_dir, dataset, seed, steps, eval_every, overrides=()):
    """Trains (or resumes) a run; returns {step: validation loss}."""
    os.makedirs(output, exist_ok=True)
    shutil.copy(os.path.join(tokenizer_dir, "tokenizer.model"), output)
    subprocess.run([sys.executable, os.path.join(ROOT, "examples", "train.py"), "--output", output,
                    "--preset", "small", "--dataset", dataset, "--steps", str(steps),
                    "--eval-every-steps", str(eval_every), "--bleu-sentences", "0",
                    "--seed", str(seed), *(f"--set={o}" for o in overrides)], check=True,
                   stdout=subprocess.DEVNULL)
    with open(os.path.join(output, "logs", "metrics.jsonl")) as lines:
        return {int(log["step"]): log["val_loss"] for log in map(json.loads, lines)}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--work", default="/tmp/corpus-bench", help="tokenizer, shards, runs")
    parser.add_argument("--steps", type=int, default=600)
    parser.add_argument("--eval-every", type=int, default=100)
    parser.add_argument("--set", dest="overrides", action="append", default=[],
                        metavar="FIELD=VALUE", help="a config override for every run")
    args = parser.parse_args()
    args.work = os.path.abspath(args.work)

    tokenizer_dir, prepared_dir = ding_work_folder(args.work)
    runs = {"raw corpus, seed 1234": ("ding", 1234),
            "prepared shards, seed 1234": (f"prepared:{prepared_dir}", 1234),
            "raw corpus, seed 1235": ("ding", 1235)}
    curves = {}
    for index, (name, (dataset, seed)) in enumerate(runs.items()):
        print(f"Training: {name} ...", flush=True)
        curves[name] = train(os.path.join(args.work, f"run-{index}"), tokenizer_dir, dataset, seed,
                             args.steps, args.eval_every, args.overrides)
    names = list(curves)
    print(f"\n{machine()}; small preset {' '.join(args.overrides)} on Ding, {args.steps} steps, "
          "validation loss (label-smoothed)\n")
    print("| step | " + " | ".join(names) + " |\n" + "|---" * (len(names) + 1) + "|")
    for step in sorted(curves[names[0]]):
        print(f"| {step} | " + " | ".join(f"{curves[n].get(step, float('nan')):.4f}" for n in names)
              + " |")
    for other in names[1:]:
        gap = max(abs(curves[other][s] - curves[names[0]][s]) for s in curves[names[0]])
        print(f"largest difference, {other} - {names[0]}: {gap:.4f}")


if __name__ == "__main__":
    main()
