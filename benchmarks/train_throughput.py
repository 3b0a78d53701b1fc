"""Training throughput of the base model: ours (TensorFlow, Keras 3) and an
equivalent `torch.nn.Transformer` model (PyTorch CPU), side by side in one
run, as target tokens per second and as model FLOP utilisation against this
machine's measured float32 matmul peak.

    pip install torch==2.13.0   # only for this benchmark
    python benchmarks/train_throughput.py [--batch 32 --length 64 --steps 6]

Both run the same step: base preset (6+6 layers, d_model 512, d_ff 2048,
8 heads, dropout 0.1), a 37,000-token shared vocabulary, label-smoothed
cross-entropy and Adam, on the same fixed batch. The steps and each
framework's matmul peak are timed in turns (one of each, then again), and
every figure is a median over those rounds, so that a slow phase of a shared
machine falls on all of them alike.
"""

import argparse
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from common import (  # noqa: E402
    machine,
    matmul_peak_run,
    timed_interleaved,
    torch_transformer,
    training_flops,
)
from keras_transformer.training.sizing import random_batch  # noqa: E402


def ours(config, vocab, batch, length, xla=False, precision="float32"):
    """One training step of our model, as a callable."""
    from keras_transformer.training.sizing import synthetic_step

    return synthetic_step(config, vocab, batch, length, precision, xla)


def pytorch(config, vocab, batch, length):
    """One training step of the `torch.nn.Transformer` model, as a callable."""
    import torch

    torch.set_num_threads(os.cpu_count())
    source, target_in, labels = (torch.from_numpy(a.astype("int64"))
                                 for a in random_batch(batch, length, vocab))
    model = torch_transformer(config, vocab)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-4, betas=(0.9, 0.98), eps=1e-9)
    loss_fn = torch.nn.CrossEntropyLoss(ignore_index=0, label_smoothing=config.label_smoothing)

    def step():
        optimizer.zero_grad(set_to_none=True)
        logits = model(source, target_in)
        loss = loss_fn(logits.reshape(-1, vocab), labels.reshape(-1))
        loss.backward()
        optimizer.step()
        return loss.item()

    model.train()
    return step


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=32, help="sentences per batch")
    parser.add_argument("--length", type=int, default=64, help="tokens per sentence and side")
    parser.add_argument("--vocab", type=int, default=37000)
    parser.add_argument("--steps", type=int, default=6, help="timed rounds (after 2 warm-up rounds)")
    args = parser.parse_args()

    from keras_transformer.models import BASE

    flops = training_flops(BASE, args.vocab, args.batch, args.length, args.length)
    tokens = args.batch * args.length
    peaks = {
        "TensorFlow float32": matmul_peak_run("tensorflow", "float32"),
        "TensorFlow bfloat16": matmul_peak_run("tensorflow", "bfloat16"),
        "PyTorch float32": matmul_peak_run("torch", "float32"),
    }
    shape = (BASE, args.vocab, args.batch, args.length)
    steps = {  # name: (step, the peak its MFU is against)
        "ours, float32": (ours(*shape), "TensorFlow float32"),
        "ours, float32, --xla": (ours(*shape, xla=True), "TensorFlow float32"),
        "ours, mixed_bfloat16": (ours(*shape, precision="mixed_bfloat16"), "TensorFlow bfloat16"),
        "torch.nn.Transformer, float32": (pytorch(*shape), "TensorFlow float32"),
    }
    seconds = timed_interleaved(
        {name: run for name, (run, _) in peaks.items()} | {name: run for name, (run, _) in steps.items()},
        warmup=2, repeats=args.steps,
    )
    rate = {name: peak_flops / seconds[name] for name, (_, peak_flops) in peaks.items()}

    print(f"Machine: {machine()}. Matmul peaks (squares of the fastest of 1024/2048/4096, "
          f"median over the rounds): "
          + ", ".join(f"{name} {value / 1e9:.0f} GFLOP/s" for name, value in rate.items()))
    print(f"Base model, vocabulary {args.vocab}, batch {args.batch} x {args.length} tokens per side, "
          f"{flops / 1e12:.2f} TFLOP per step (matmuls, forward and backward)\n")
    print(f"{'':32s} {'s/step':>7s} {'target tok/s':>13s} {'GFLOP/s':>8s} {'MFU':>5s}")
    for name, (_, peak) in steps.items():
        print(f"{name:32s} {seconds[name]:7.2f} {tokens / seconds[name]:13.0f} "
              f"{flops / seconds[name] / 1e9:8.0f} {flops / seconds[name] / rate[peak]:5.0%}")
    print("\nMFU: achieved matmul FLOP/s over TensorFlow's matmul peak of the same precision.")
    torch_step = seconds["torch.nn.Transformer, float32"]
    print(f"PyTorch against its own float32 matmul peak: {flops / torch_step / rate['PyTorch float32']:.0%}")
    best_float32 = min(seconds["ours, float32"], seconds["ours, float32, --xla"])
    print(f"Ours (float32, best) / PyTorch (float32) throughput: {torch_step / best_float32:.2f}x")


if __name__ == "__main__":
    main()
