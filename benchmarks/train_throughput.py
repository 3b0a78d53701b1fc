"""Training throughput: our training step against `torch.nn.Transformer` of
the same shape, side by side in turns in one run, as step time, target
tokens a second and model FLOP utilisation (MFU).

    pip install torch==2.13.0   # only for this benchmark
    python benchmarks/train_throughput.py [--batch 32 --length 64 --steps 6]
    python benchmarks/train_throughput.py --backend jax [--sizes base:400,big:400]
    python benchmarks/train_throughput.py --backend jax --analyze [--sizes base:400,big:400]

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
and the sizes are the paper's models at about 25k target tokens a step (400
rows of 64 tokens a side), and base also at half and twice that (which
separates the step's fixed cost from its per-token work; 1,600 rows ran out
of an H100's 80 GB after the smaller sizes), MFU against the chip's dense
bfloat16 peak (989 TFLOP/s for an H100 or H200 SXM; measured for other
chips). This part imports no TensorFlow: a GPU machine with JAX and PyTorch
needs only the wheels of keras, namex and optree (docs/benchmarks.md). On a
CPU everything is float32, the default size is the base model at 16 rows,
TensorFlow's step (`Trainer`) is timed in turns with the others from a
process of its own (where TensorFlow is installed), and MFU is against the
best float32 matmul peak of JAX and PyTorch, measured in the same turns.

--analyze (no timing, any device JAX has): XLA's cost and memory analysis
of the compiled update at the GPU shapes, base and big at vocabularies
37,000 and 8,000: FLOPs, bytes accessed and temporaries, and the operand
types of the matmuls over the vocabulary. On the CPU backend bfloat16 is
computed in float32 and fused otherwise than on a GPU, so absolute bytes
are not a GPU's; a change's delta is what tells. --profile DIR traces five
updates of ours at the first size (`jax.profiler`) and prints where the
device's time goes; --loop times the whole `train` loop (progress bar,
metrics, a checkpoint every 25 updates, the next batch's transfer) against
bare updates; --dropout overrides the presets' dropout (0: a step without
dropout's random numbers).

MFU = `common.training_flops` (3 x the forward pass's matmul and attention
FLOPs, at the full padded shapes: Q/K/V/output projections, attention
scores and weighted sums, feed-forward, the tied output projection) / step
time / peak. Every figure is a median over the timed rounds, the
contenders taking turns within each round (this machine's speed drifts).
"""

import argparse
import contextlib
import gc
import itertools
import os
import subprocess
import sys
import time

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

GPU_SIZES = "base:400,big:400,base:200,base:800"
CPU_SIZES = "base:16"
BF16_PEAKS = {"H100": 989e12, "H200": 989e12, "A100": 312e12}
"""Dense bfloat16 tensor-core peaks (SXM parts), by the name in the device kind."""
GOALS = {"base": 0.40, "big": 0.50}
"""The MFU goals at about 25k target tokens a step on an H100 or H200."""
UPDATES_A_TURN = 10
"""On a GPU, updates a contender runs in a turn before it waits for the
device: a training loop never drains the device's queue between updates
(`JaxTrainer.train_step` reads an update's statistics after dispatching the
next), so neither does a timed turn but at its end."""


def ours(config, vocab, batch, length, xla=False, precision="float32"):
    """One training step of our model on TensorFlow, as a callable."""
    from keras_transformer.training.sizing import synthetic_step

    return synthetic_step(config, vocab, batch, length, precision, xla)


def pytorch(config, vocab, batch, length, device="cpu", compiled=False, bfloat16=False,
            count=1):
    """`count` training steps of the `torch.nn.Transformer` model, as a
    callable (`updates`): eager or under `torch.compile`, in float32 or
    bfloat16 autocast, with Adam's fused update where PyTorch has it for
    the device."""
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
        return loss

    model.train()
    return updates(step, count, lambda loss: loss.item())


def updates(step, count, finish):
    """A callable that runs `step` `count` times and then `finish(the last
    step's result)`, which waits for the device: the updates queue up as
    in a training loop that reads its statistics late, and a turn's time
    over `count` is an update's."""
    def run():
        for _ in range(count):
            result = step()
        return finish(result)

    return run


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
    parser.add_argument("--analyze", action="store_true",
                        help="--backend jax: XLA's cost and memory analysis of the compiled "
                             "update at the sizes, vocabularies 37,000 and 8,000 (no timing)")
    parser.add_argument("--profile", metavar="DIR",
                        help="--backend jax: trace 5 updates of ours at the first size into DIR "
                             "and print the device time by kernel")
    parser.add_argument("--loop", action="store_true",
                        help="--backend jax: the whole train loop against bare updates, at the "
                             "first size")
    parser.add_argument("--dropout", type=float,
                        help="--backend jax: this dropout instead of the presets'")
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

def jax_trainer(config, vocab, precision):
    """A `JaxTrainer` of a fresh `config` model in `precision`."""
    import keras

    from keras_transformer.models import transformer
    from keras_transformer.training.jax_trainer import JaxTrainer
    from keras_transformer.training.schedule import paper_optimizer

    previous = keras.config.dtype_policy()
    keras.config.set_dtype_policy(precision)
    try:
        return JaxTrainer(transformer(config, vocab), paper_optimizer(config),
                          label_smoothing=config.label_smoothing)
    finally:
        keras.config.set_dtype_policy(previous)


def numpy_batch(rows, length, vocab, seed=0):
    """`({"source_ids", "target_ids"}, labels)` of random ids, as train's input gives them."""
    from keras_transformer.training.sizing import random_batch

    source, target_in, labels = random_batch(rows, length, vocab, seed)
    return {"source_ids": source, "target_ids": target_in}, labels


def jax_updates(trainer, vocab, rows, length, count=1):
    """`count` updates of a `JaxTrainer` on a fixed random batch, as a
    callable (`updates`)."""
    batches = itertools.repeat(numpy_batch(rows, length, vocab))
    return updates(lambda: trainer.train_step(batches), count,
                   lambda _: trainer.pending_sums().get("loss"))


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

    presets = {name: config if args.dropout is None else config.replace(dropout=args.dropout)
               for name, config in PRESETS.items()}
    platform, kind = jax.default_backend(), jax.devices()[0].device_kind
    on_gpu = platform == "gpu"
    precision = "mixed_bfloat16" if on_gpu else "float32"
    sizes = [(preset, int(rows)) for preset, rows in
             (size.split(":") for size in (args.sizes or (GPU_SIZES if on_gpu else CPU_SIZES))
              .split(","))]
    if args.analyze:
        return analyze(presets, sizes if args.sizes else [("base", 400), ("big", 400)],
                       args.length)
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
    if args.dropout is not None:
        print(f"Dropout {args.dropout} instead of the presets'.")
    print(f"{'step':36s} {'ms':>8s} {'target tok/s':>13s} {'TFLOP/s':>8s} {'MFU':>6s}")
    results = {}
    first = None  # the first size's trainer, which --profile and --loop use again (compiled)
    for preset, rows in sizes:
        try:
            trainer = jax_trainer(presets[preset], args.vocab, precision)
            first = first or trainer
            results |= time_size(args, presets[preset], preset, rows, trainer, on_gpu,
                                 tensorflow, peaks, named_peak)
        except Exception as error:  # a size that does not fit the device is a result too
            if "RESOURCE_EXHAUSTED" not in str(error) and "out of memory" not in str(error):
                raise
            print(f"{f'{preset} x{rows}':36s} out of memory ({str(error).splitlines()[0][:80]})")
        trainer = None
        gc.collect()
        if on_gpu and not args.no_torch:
            import torch

            torch.cuda.empty_cache()  # PyTorch's freed blocks, for the next size's JAX
    _against_goals(results, on_gpu, kind)
    preset, rows = sizes[0]
    if args.profile:
        profile(first, presets[preset], args.vocab, rows, args.length, args.profile)
    if args.loop:
        loop_against_bare(first, args.vocab, rows, args.length)
    if args.profile:  # last: it compiles the update once more
        with open(os.path.join(args.profile, "update.hlo.txt"), "w") as hlo:
            hlo.write(first.lowered_update(*numpy_batch(rows, args.length, args.vocab))
                      .compile().as_text())


def time_size(args, config, preset, rows, trainer, on_gpu, tensorflow, peaks, named_peak):
    """Times ours (`trainer`'s update) and the others at one size, in turns;
    prints a line each and returns `{(preset, rows, name): (seconds, MFU)}`."""
    count = UPDATES_A_TURN if on_gpu else 1
    contenders = {"ours (Keras on JAX)": jax_updates(trainer, args.vocab, rows, args.length,
                                                     count)}
    if not args.no_torch:
        contenders["torch.compile"] = pytorch(config, args.vocab, rows, args.length,
                                              "cuda" if on_gpu else "cpu", compiled=True,
                                              bfloat16=on_gpu, count=count)
    if tensorflow:
        contenders["ours (Keras on TensorFlow)"] = TensorFlowWorker(preset, rows, args.length,
                                                                     args.vocab)
    seconds = timed_interleaved(contenders | {name: run for name, (run, _) in peaks.items()},
                                warmup=2, repeats=args.steps)
    seconds |= {name: seconds[name] / count for name in contenders
                if not isinstance(contenders[name], TensorFlowWorker)}
    peak = named_peak or max(work / seconds[name] for name, (_, work) in peaks.items())
    flops = training_flops(config, args.vocab, rows, args.length, args.length)
    results = {}
    for name, contender in contenders.items():
        achieved = flops / seconds[name]
        results[(preset, rows, name)] = (seconds[name], achieved / peak)
        print(f"{f'{preset} x{rows}, {name}':36s} {seconds[name] * 1000:8.1f} "
              f"{rows * args.length / seconds[name]:13.0f} {achieved / 1e12:8.2f} "
              f"{achieved / peak:6.1%}", flush=True)
        if isinstance(contender, TensorFlowWorker):
            contender.close()
    return results


def analyze(presets, sizes, length, vocabularies=(37000, 8000)):
    """Prints XLA's cost and memory analysis of the compiled update (in
    mixed_bfloat16, as on a GPU) for each size and vocabulary."""
    import jax

    print(f"XLA's analysis of the compiled update on {jax.default_backend()} "
          f"({jax.devices()[0].device_kind}), mixed_bfloat16, {length} + {length} tokens a row. "
          "On a CPU bfloat16 runs as float32 and fuses otherwise than on a GPU: compare "
          "changes, not absolute bytes.")
    print(f"{'update':24s} {'TFLOP':>7s} {'GB accessed':>12s} {'GB temporaries':>15s}  "
          "matmuls over the vocabulary (operands -> result)")
    for preset, rows in sizes:
        for vocab in vocabularies:
            trainer = jax_trainer(presets[preset], vocab, "mixed_bfloat16")
            lowered = trainer.lowered_update(*numpy_batch(rows, length, vocab))
            compiled = lowered.compile()
            cost = compiled.cost_analysis()
            cost = cost[0] if isinstance(cost, list) else cost  # a list in older JAX
            memory = compiled.memory_analysis()
            print(f"{f'{preset} x{rows}, V={vocab}':24s} {cost['flops'] / 1e12:7.2f} "
                  f"{cost['bytes accessed'] / 1e9:12.1f} {memory.temp_size_in_bytes / 1e9:15.1f}  "
                  + ", ".join(sorted(_vocabulary_matmuls(lowered.as_text(), vocab))))
            del trainer, lowered, compiled
            gc.collect()


def _vocabulary_matmuls(stablehlo, vocab):
    """The operand and result types of the matmuls in the lowered program
    that have the vocabulary as a dimension (the output projection, forward
    and backward), e.g. "bf16 x bf16 -> bf16"."""
    import re

    found = set()
    for line in stablehlo.splitlines():
        match = re.search(r"stablehlo\.dot_general.*: \((tensor<[^>]*>), (tensor<[^>]*>)\) -> "
                          r"(tensor<[^>]*>)", line)
        if match and any(f"x{vocab}x" in t or f"<{vocab}x" in t or f"x{vocab}x" in t.replace(">", "x")
                         for t in match.groups()):
            found.add("{} x {} -> {}".format(*(t.rsplit("x", 1)[1].rstrip(">")
                                                 for t in match.groups())))
    return found


def profile(trainer, config, vocab, rows, length, directory, updates=5):
    """Traces `updates` of `trainer` with `jax.profiler` into `directory`
    and prints the device's busy time an update and its largest kernels
    (from the trace's Perfetto file; on a CPU there are no device kernels)."""
    import glob
    import gzip
    import json

    import jax

    batches = itertools.repeat(numpy_batch(rows, length, vocab))
    trainer.train_step(batches)
    trainer.pending_sums()
    with jax.profiler.trace(directory, create_perfetto_trace=True):
        started = time.perf_counter()
        for _ in range(updates):
            trainer.train_step(batches)
        trainer.pending_sums()
        wall = (time.perf_counter() - started) / updates
    path = max(glob.glob(os.path.join(directory, "**", "perfetto_trace.json.gz"), recursive=True),
               key=os.path.getmtime)
    with gzip.open(path) as trace:
        events = json.load(trace)
    events = events["traceEvents"] if isinstance(events, dict) else events
    processes = {e["pid"]: e["args"]["name"] for e in events
                 if e.get("ph") == "M" and e.get("name") == "process_name"}
    threads = {(e["pid"], e["tid"]): e["args"]["name"] for e in events
               if e.get("ph") == "M" and e.get("name") == "thread_name"}
    device = {pid for pid, name in processes.items() if "GPU" in name or "TPU" in name}
    kernels = [e for e in events if e.get("ph") == "X" and e["pid"] in device
               and threads.get((e["pid"], e.get("tid")), "").startswith("Stream")]
    print(f"\nProfile of {updates} updates, d_model {config.d_model}, {rows} rows: {wall * 1000:.1f} ms an update (traced); trace in {path}")
    if not kernels:
        print("No device kernels in the trace (" + ", ".join(sorted(set(processes.values())))
              + ").")
        return
    by_name = {}
    for event in kernels:
        total, count = by_name.get(event["name"], (0.0, 0))
        by_name[event["name"]] = (total + event["dur"], count + 1)
    busy = sum(total for total, _ in by_name.values()) / updates / 1000
    print(f"Device busy {busy:.1f} ms an update ({busy / (wall * 1000):.0%} of it), "
          f"{len(kernels) / updates:.0f} kernels an update.")
    matmul = sum(total for name, (total, _) in by_name.items()
                 if any(word in name.lower() for word in ("gemm", "xmma", "cutlass", "nvjet",
                                                           "cublas", "triton_gemm", "dot")))
    print(f"Matmul kernels {matmul / updates / 1000:.1f} ms an update; the rest "
          f"{busy - matmul / updates / 1000:.1f} ms. Largest kernels (ms an update, calls):")
    for name, (total, count) in sorted(by_name.items(), key=lambda item: -item[1][0])[:25]:
        print(f"  {total / updates / 1000:7.2f} {count // updates:5d}  {name[:110]}")
    small = [total for total, count in by_name.values() if total / count < 10]
    print(f"Kernels under 10 us each: {sum(small) / updates / 1000:.1f} ms an update.")


def loop_against_bare(trainer, vocab, rows, length, updates=60):
    """The time of an update in `JaxTrainer.train` (progress bar, the
    loop's metrics, a new NumPy batch put on the device each update)
    against a bare `train_step` on one batch, and a safetensors
    checkpoint's time, with its share at train's default interval (500
    updates)."""
    import tempfile

    from keras_transformer.training.checkpoints import SafetensorsCheckpoints

    batches = [numpy_batch(rows, length, vocab, seed) for seed in range(4)]
    bare = jax_updates(trainer, vocab, rows, length, updates)
    bare()
    rounds = {"bare": [], "loop": []}
    for _ in range(3):  # in turns
        started = time.perf_counter()
        bare()
        rounds["bare"].append((time.perf_counter() - started) / updates)
        started = time.perf_counter()
        with open(os.devnull, "w") as nowhere, contextlib.redirect_stdout(nowhere):
            trainer.train(itertools.cycle(batches), trainer.step + updates,
                          steps_per_epoch=updates, verbose=1)  # the progress bar, unseen
        rounds["loop"].append((time.perf_counter() - started) / updates)
    bare, loop = (sorted(times)[1] for times in rounds.values())
    with tempfile.TemporaryDirectory() as directory:
        checkpoints = SafetensorsCheckpoints(directory, trainer, keep=1, every_steps=1)
        saves = []
        for _ in range(2):
            started = time.perf_counter()
            checkpoints.save()
            saves.append(time.perf_counter() - started)
    interval = 500  # train's default (RunOptions.checkpoint_every_steps; run.py imports TensorFlow)
    with_saves = loop + min(saves) / interval
    print(f"\nThe loop around the step, {rows} rows (median of 3 rounds of {updates} updates in "
          f"turns): bare update {bare * 1000:.1f} ms, in train {loop * 1000:.1f} ms "
          f"({loop / bare - 1:+.1%}); a checkpoint {min(saves):.2f} s, every {interval} updates "
          f"{min(saves) / interval * 1000:.1f} ms an update; in all {with_saves / bare - 1:+.1%} "
          "(goal: within 5%).")


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
