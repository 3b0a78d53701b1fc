"""Training throughput: our training step against `torch.nn.Transformer` of
the same shape, side by side in turns in one run, as step time, target
tokens a second and model FLOP utilisation (MFU).

    pip install torch==2.13.0   # only for this benchmark
    python benchmarks/train_throughput.py [--batch 32 --length 64 --steps 6]
    python benchmarks/train_throughput.py --backend jax [--sizes base:400,big:400]

--backend tensorflow (the default), on this CPU: the base preset (6+6
layers, d_model 512, d_ff 2048, 8 heads, dropout 0.1), a 37,000-token
shared vocabulary, label-smoothed cross-entropy and Adam on a fixed batch:
our `Trainer` step in float32, with `--xla` and in mixed_bfloat16, and the
PyTorch model in float32 on the CPU. MFU is against TensorFlow's measured
matmul peak of the same precision.

--backend jax: our step is `JaxTrainer`'s update, what `KERAS_BACKEND=jax
keras-transformer train` runs (one compiled program, the state's buffers
donated), on JAX's default device; the PyTorch model of the same shape (a
tied embedding) runs under `torch.compile` with Adam's fused update on the
same kind of device. On a GPU both take bfloat16 (mixed_bfloat16; autocast)
and the sizes are the paper's models at about 25k and 100k target tokens a
step (400 and 1,600 rows of 64 tokens a side), MFU against the chip's dense
bfloat16 peak (989 TFLOP/s for an H100 or H200 SXM; measured for other
chips). This part imports no TensorFlow: a GPU machine with JAX and PyTorch
needs only the wheels of keras, namex and optree (docs/benchmarks.md). On a
CPU everything is float32, the default size is the base model at 16 rows,
TensorFlow's step (`Trainer`) is timed in turns with the others from a
process of its own (where TensorFlow is installed), and MFU is against the
best float32 matmul peak of JAX and PyTorch, measured in the same turns.

MFU = `common.training_flops` (3 x the forward pass's matmul and attention
FLOPs, at the full padded shapes: Q/K/V/output projections, attention
scores and weighted sums, feed-forward, the tied output projection) / step
time / peak. Every figure is a median over the timed rounds, the
contenders taking turns within each round (this machine's speed drifts).
"""

import argparse
import gc
import itertools
import os
import subprocess
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
# JAX would otherwise take 75% of a GPU's memory at its start, PyTorch's share too.
os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")

from common import (  # noqa: E402
    machine,
    matmul_peak_run,
    timed_interleaved,
    torch_transformer,
    training_flops,
)

GPU_SIZES = "base:400,base:1600,big:400,big:1600"
CPU_SIZES = "base:16"
BF16_PEAKS = {"H100": 989e12, "H200": 989e12, "A100": 312e12}
"""Dense bfloat16 tensor-core peaks (SXM parts), by the name in the device kind."""
GOALS = {"base": 0.40, "big": 0.50}
"""The MFU goals at about 25k target tokens a step on an H100 or H200."""


def ours(config, vocab, batch, length, xla=False, precision="float32"):
    """One training step of our model on TensorFlow, as a callable."""
    from keras_transformer.training.sizing import synthetic_step

    return synthetic_step(config, vocab, batch, length, precision, xla)


def pytorch(config, vocab, batch, length, device="cpu", compiled=False, bfloat16=False):
    """One training step of the `torch.nn.Transformer` model, as a callable:
    eager or under `torch.compile`, in float32 or bfloat16 autocast, with
    Adam's fused update where PyTorch has it for the device."""
    import torch

    from keras_transformer.training.sizing import random_batch

    torch.set_num_threads(os.cpu_count())
    source, target_in, labels = (torch.from_numpy(a.astype("int64")).to(device)
                                 for a in random_batch(batch, length, vocab))
    model = torch_transformer(config, vocab).to(device)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-4, betas=(0.9, 0.98), eps=1e-9,
                                 fused=device != "cpu" or None)
    loss_fn = torch.nn.CrossEntropyLoss(ignore_index=0, label_smoothing=config.label_smoothing)
    forward = torch.compile(model) if compiled else model

    def step():
        optimizer.zero_grad(set_to_none=True)
        with torch.autocast(device_type=device, dtype=torch.bfloat16, enabled=bfloat16):
            logits = forward(source, target_in)
            loss = loss_fn(logits.reshape(-1, vocab), labels.reshape(-1))
        loss.backward()
        optimizer.step()
        return loss.item()

    model.train()
    return step


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", choices=("tensorflow", "jax"), default="tensorflow")
    parser.add_argument("--batch", type=int, default=32,
                        help="sentences per batch (--backend tensorflow)")
    parser.add_argument("--length", type=int, default=64, help="tokens per sentence and side")
    parser.add_argument("--vocab", type=int, default=37000)
    parser.add_argument("--steps", type=int, default=6, help="timed rounds (after 2 warm-up rounds)")
    parser.add_argument("--sizes", help=f"--backend jax: PRESET:ROWS,... (default {GPU_SIZES} on "
                                        f"a GPU, {CPU_SIZES} on a CPU)")
    parser.add_argument("--no-torch", action="store_true",
                        help="--backend jax: leave out the PyTorch model")
    parser.add_argument("--tensorflow-worker", nargs=4, metavar=("PRESET", "ROWS", "LENGTH", "VOCAB"),
                        help=argparse.SUPPRESS)
    args = parser.parse_args()
    # Before Keras is first imported: it picks its backend then.
    os.environ["KERAS_BACKEND"] = "tensorflow" if args.tensorflow_worker else args.backend
    if args.tensorflow_worker:
        return tensorflow_worker(*args.tensorflow_worker)
    if args.backend == "jax":
        return jax_main(args)

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


# ------------------------------------------------------------------ JAX

def jax_step(config, vocab, rows, length, precision):
    """One update of `JaxTrainer` on a fixed random batch, as a callable."""
    import keras

    from keras_transformer.models import transformer
    from keras_transformer.training.jax_trainer import JaxTrainer
    from keras_transformer.training.schedule import paper_optimizer
    from keras_transformer.training.sizing import random_batch

    source, target_in, labels = random_batch(rows, length, vocab)
    previous = keras.config.dtype_policy()
    keras.config.set_dtype_policy(precision)
    try:
        trainer = JaxTrainer(transformer(config, vocab), paper_optimizer(config),
                             label_smoothing=config.label_smoothing)
    finally:
        keras.config.set_dtype_policy(previous)
    batches = itertools.repeat(({"source_ids": source, "target_ids": target_in}, labels))
    return lambda: trainer.train_step(batches)["loss"]


class TensorFlowWorker:
    """Our TensorFlow step in a process of its own (this one runs Keras on
    JAX), stepping when told, so that it takes its turns with the others."""

    def __init__(self, preset, rows, length, vocab):
        self.process = subprocess.Popen(
            [sys.executable, __file__, "--tensorflow-worker", preset, str(rows), str(length),
             str(vocab)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
            env=dict(os.environ, KERAS_BACKEND="tensorflow"))
        if self.process.stdout.readline().strip() != "ready":
            raise RuntimeError("TensorFlow's worker did not start")

    def __call__(self):
        self.process.stdin.write("step\n")
        self.process.stdin.flush()
        return float(self.process.stdout.readline())

    def close(self):
        self.process.stdin.close()
        self.process.wait()


def tensorflow_worker(preset, rows, length, vocab):
    from keras_transformer.models import PRESETS

    step = ours(PRESETS[preset], int(vocab), int(rows), int(length))
    step()
    print("ready", flush=True)
    for _ in sys.stdin:
        print(step(), flush=True)


def jax_main(args):
    import jax

    from keras_transformer.models import PRESETS

    platform, kind = jax.default_backend(), jax.devices()[0].device_kind
    on_gpu = platform == "gpu"
    precision = "mixed_bfloat16" if on_gpu else "float32"
    named_peak = next((peak for name, peak in BF16_PEAKS.items() if name in kind), None)
    if on_gpu and named_peak:
        peaks, peak_note = {}, f"its dense bfloat16 peak, {named_peak / 1e12:.0f} TFLOP/s"
    elif on_gpu:
        peaks = {"JAX bfloat16": matmul_peak_run("jax", "bfloat16", sizes=(4096, 8192))}
        peak_note = "JAX's measured bfloat16 matmul peak"
    else:
        peaks = {"JAX float32": matmul_peak_run("jax", "float32")}
        if not args.no_torch:
            peaks["PyTorch float32"] = matmul_peak_run("torch", "float32")
        peak_note = "the best float32 matmul peak measured (" + ", ".join(peaks) + ")"
    tensorflow = not on_gpu and _has_tensorflow()
    print(f"Machine: {machine()}; JAX {jax.__version__} on {platform} ({kind}); {precision}; "
          f"MFU against {peak_note}.")
    if not on_gpu and not tensorflow:
        print("(TensorFlow is not installed here: no TensorFlow column.)")
    print(f"{'step':36s} {'ms':>8s} {'target tok/s':>13s} {'TFLOP/s':>8s} {'MFU':>6s}")
    sizes = args.sizes or (GPU_SIZES if on_gpu else CPU_SIZES)
    results = {}
    for preset, rows in (size.split(":") for size in sizes.split(",")):
        config, rows = PRESETS[preset], int(rows)
        contenders = {"ours (Keras on JAX)": jax_step(config, args.vocab, rows, args.length,
                                                       precision)}
        if not args.no_torch:
            contenders["torch.compile"] = pytorch(config, args.vocab, rows, args.length,
                                                  "cuda" if on_gpu else "cpu", compiled=True,
                                                  bfloat16=on_gpu)
        if tensorflow:
            contenders["ours (Keras on TensorFlow)"] = TensorFlowWorker(preset, rows, args.length,
                                                                         args.vocab)
        seconds = timed_interleaved(contenders | {name: run for name, (run, _) in peaks.items()},
                                    warmup=2, repeats=args.steps)
        peak = named_peak or max(work / seconds[name] for name, (_, work) in peaks.items())
        flops = training_flops(config, args.vocab, rows, args.length, args.length)
        for name in contenders:
            achieved = flops / seconds[name]
            results[(preset, rows, name)] = (seconds[name], achieved / peak)
            print(f"{f'{preset} x{rows}, {name}':36s} {seconds[name] * 1000:8.1f} "
                  f"{rows * args.length / seconds[name]:13.0f} {achieved / 1e12:8.2f} "
                  f"{achieved / peak:6.1%}")
        for contender in contenders.values():
            if isinstance(contender, TensorFlowWorker):
                contender.close()
        del contenders
        gc.collect()
    _against_goals(results, on_gpu, kind)


def _against_goals(results, on_gpu, kind):
    """Ours against torch.compile at every size, and, on an H100 or H200,
    against the MFU goals at about 25k tokens a step."""
    print()
    for (preset, rows, name), (seconds, mfu) in sorted(results.items()):
        if name != "ours (Keras on JAX)":
            continue
        compiled = results.get((preset, rows, "torch.compile"))
        line = f"{preset} x{rows}: ours"
        if compiled:
            line += f" {compiled[0] / seconds:.2f}x torch.compile's speed"
        if on_gpu and rows == 400 and any(name in kind for name in ("H100", "H200")):
            goal = GOALS[preset]
            line += f"; MFU {mfu:.1%} against the goal of {goal:.0%} ({'met' if mfu >= goal else 'not met'})"
        print(line)


def _has_tensorflow():
    import importlib.util

    try:
        return importlib.util.find_spec("tensorflow") is not None
    except ImportError:
        return False


if __name__ == "__main__":
    main()
