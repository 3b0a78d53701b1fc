"""Training throughput of the base model: ours (TensorFlow, Keras 3) and an
equivalent `torch.nn.Transformer` model (PyTorch CPU), side by side in one
run, as target tokens per second and as model FLOP utilisation against this
machine's measured float32 matmul peak.

    pip install torch==2.13.0   # only for this benchmark
    python benchmarks/train_throughput.py [--batch 32 --length 64 --steps 6]

Both run the same step: base preset (6+6 layers, d_model 512, d_ff 2048,
8 heads, dropout 0.1), a 37,000-token shared vocabulary, label-smoothed
cross-entropy and Adam, on the same fixed batch.
"""

import argparse
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402

from common import machine, tf_matmul_peak, timed, torch_transformer, training_flops  # noqa: E402


def batch_ids(batch, length, vocab, seed=0):
    rng = np.random.default_rng(seed)
    source = rng.integers(4, vocab, (batch, length)).astype("int32")
    target = rng.integers(4, vocab, (batch, length + 1)).astype("int32")
    return source, target[:, :-1], target[:, 1:]


def ours(config, vocab, batch, length, steps, xla=False, precision="float32"):
    import keras
    import tensorflow as tf

    from keras_transformer.models import transformer
    from keras_transformer.training import Trainer, make_strategy, paper_optimizer, set_precision

    source, target_in, labels = batch_ids(batch, length, vocab)
    set_precision(precision)
    try:
        model = transformer(config, vocab)
        trainer = Trainer(model, paper_optimizer(config), make_strategy("default"),
                          config.label_smoothing, jit_compile=xla)
    finally:
        set_precision("float32")
    dataset = tf.data.Dataset.from_tensors(
        ({"source_ids": source, "target_ids": target_in}, labels)).repeat()
    iterator = iter(dataset)
    seconds = timed(lambda: trainer.train_step(iterator)["loss"].numpy(), warmup=2, repeats=steps)
    keras.backend.clear_session()
    return seconds


def pytorch(config, vocab, batch, length, steps):
    import torch

    torch.set_num_threads(os.cpu_count())
    source, target_in, labels = (torch.from_numpy(a.astype("int64")) for a in batch_ids(batch, length, vocab))
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
    return timed(step, warmup=2, repeats=steps)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=32, help="sentences per batch")
    parser.add_argument("--length", type=int, default=64, help="tokens per sentence and side")
    parser.add_argument("--vocab", type=int, default=37000)
    parser.add_argument("--steps", type=int, default=6, help="timed steps (after 2 warm-up steps)")
    args = parser.parse_args()

    from keras_transformer.models import BASE

    peak, bf16_peak = tf_matmul_peak("float32"), tf_matmul_peak("bfloat16")
    flops = training_flops(BASE, args.vocab, args.batch, args.length, args.length)
    tokens = args.batch * args.length
    print(f"Machine: {machine()}. Matmul peak in TensorFlow (best of 1024/2048/4096 squares): "
          f"float32 {peak / 1e9:.0f} GFLOP/s, bfloat16 {bf16_peak / 1e9:.0f} GFLOP/s")
    print(f"Base model, vocabulary {args.vocab}, batch {args.batch} x {args.length} tokens per side, "
          f"{flops / 1e12:.2f} TFLOP per step (matmuls, forward and backward)\n")
    shape = (BASE, args.vocab, args.batch, args.length, args.steps)
    rows = [
        ("ours, float32", ours(*shape), peak),
        ("ours, float32, --xla", ours(*shape, xla=True), peak),
        ("ours, mixed_bfloat16", ours(*shape, precision="mixed_bfloat16"), bf16_peak),
        ("torch.nn.Transformer, float32", pytorch(*shape), peak),
    ]
    print(f"{'':32s} {'s/step':>7s} {'target tok/s':>13s} {'GFLOP/s':>8s} {'MFU':>5s}")
    for name, seconds, own_peak in rows:
        print(f"{name:32s} {seconds:7.2f} {tokens / seconds:13.0f} {flops / seconds / 1e9:8.0f} "
              f"{flops / seconds / own_peak:5.0%}")
    print("\nMFU: achieved matmul FLOP/s over the measured peak of the same precision.")
    best_float32 = min(rows[0][1], rows[1][1])
    print(f"Ours (float32, best) / PyTorch (float32) throughput: {rows[3][1] / best_float32:.2f}x")


if __name__ == "__main__":
    main()
