"""Whether XLA's CPU runtime gains from a second thread on the matmuls of a
lone sentence's search: each matmul of a step (the small preset's and the
base size's, beam 4 and greedy, and the encoder's of a 16-token source)
alone in a compiled loop, on one intra-op thread and on two, under
TensorFlow's XLA with its default flags and with each of its library
fusions for dots (XNNPACK, YNNPACK, oneDNN), and under JAX's XLA where JAX
is installed.

    python benchmarks/xla_threads.py [--rounds 2]

Each setting runs in a process of its own (the threads are the process's:
TensorFlow's intra-op threads, set before it starts; JAX's, the cores the
process may use), the settings in turns, round after round; the median
microseconds of a matmul over the rounds. Each loop's result depends on
every output of its matmuls, so XLA computes all of them, and each matmul
reads its weights from memory, as a step does (`time_matmuls`).

What it shows (docs/benchmarks-log.md, "One sentence alone"): CTranslate2
takes half the time on two threads; under XLA a step's matmuls of a few rows
take as long on two threads as on one, or longer, and only the output
projection gains.
"""

import argparse
import importlib.util
import json
import os
import subprocess
import sys
import time

import numpy as np

# (rows, inner, outer): a step of the small preset (d_model 256, d_ff 1,024,
# 8,000 pieces), beam 4 and greedy, and its encoder at width 16; the same at
# the base size (512, 2,048).
SHAPES = [(4, 256, 768), (4, 256, 1024), (4, 1024, 256), (4, 256, 8000), (1, 256, 8000),
          (16, 256, 1024), (4, 512, 2048), (4, 2048, 512), (4, 512, 8000), (16, 512, 2048)]

ENGINES = {
    "TensorFlow XLA": "",
    "+ XNNPACK dots": "--xla_cpu_experimental_xnn_fusion_type=dot",
    "+ YNNPACK dots": "--xla_cpu_experimental_ynn_fusion_type=dot",
    "+ oneDNN dots": "--xla_cpu_experimental_onednn_fusion_type=dot",
    "JAX XLA": None,
}

STEPS = 50
COLD_BYTES = 16 * 2**20


def compiled_loop(engine, x, weights):
    """A callable that runs `STEPS` steps of matmuls of `x` by each of
    `weights` in turn, in one loop compiled by `engine`'s XLA, each input
    depending on every output of the matmul before (so XLA computes all of
    them)."""
    if engine == "JAX XLA":
        import jax
        import jax.numpy as jnp

        matrices = [jnp.asarray(w) for w in weights]

        def step(i, x):
            for w in matrices:
                x = x + 1e-3 * jnp.max(x @ w, axis=1, keepdims=True)
            return x

        loop = jax.jit(lambda x: jax.lax.fori_loop(0, STEPS, step, x))
        return lambda: loop(x).block_until_ready()
    import tensorflow as tf

    matrices, source = [tf.constant(w) for w in weights], tf.constant(x)

    def body(i, x):
        for w in matrices:
            x = x + 1e-3 * tf.reduce_max(tf.matmul(x, w), axis=1, keepdims=True)
        return i + 1, x

    loop = tf.function(lambda x: tf.while_loop(lambda i, x: i < STEPS, body, (0, x))[1],
                       jit_compile=True, autograph=False)
    return lambda: loop(source).numpy()


def time_matmuls(engine):
    """Median microseconds of each of `SHAPES`'s matmuls in this process, by
    `engine` (a name of `ENGINES`), keyed "rowsxinnerxouter". Each is timed
    on distinct weight matrices of `COLD_BYTES` in all, one after another,
    so that a matmul's weights come from memory, not the core's cache, as
    in a step, whose weights (15 MB at the small preset) are larger than the
    cores' caches (2 MB each here): on weights in cache the figures differ
    (4 x 1,024 x 256: 16 us on one thread and 38 on two, against 43 and 66
    from memory)."""
    rng = np.random.default_rng(0)
    found = {}
    for rows, inner, outer in SHAPES:
        count = max(2, -(-COLD_BYTES // (4 * inner * outer)))
        weights = [rng.standard_normal((inner, outer)).astype("float32") * 0.05
                   for _ in range(count)]
        run = compiled_loop(engine, rng.standard_normal((rows, inner)).astype("float32"), weights)
        run()
        seconds = []
        for _ in range(5):
            start = time.perf_counter()
            run()
            seconds.append(time.perf_counter() - start)
        found[f"{rows}x{inner}x{outer}"] = float(np.median(seconds)) / (STEPS * count) * 1e6
    return found


def measure(engine, threads):
    """`time_matmuls(engine)`, run in a child process with `threads` threads."""
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", TF_NUM_INTRAOP_THREADS=str(threads))
    if ENGINES[engine] is not None:
        env["XLA_FLAGS"] = (env.get("XLA_FLAGS", "") + " " + ENGINES[engine]).strip()
    # TensorFlow's threads are its setting above; JAX's CPU client takes a
    # thread for each core the process may use.
    cores = sorted(os.sched_getaffinity(0))[:threads]
    pin = f"os.sched_setaffinity(0, {cores!r}); " if engine == "JAX XLA" else ""
    code = (f"import json, os, sys; {pin}"
            f"sys.path.insert(0, {os.path.dirname(os.path.abspath(__file__))!r}); "
            f"import xla_threads; print(json.dumps(xla_threads.time_matmuls({engine!r})))")
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                          text=True, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    engines = [name for name in ENGINES
               if name != "JAX XLA" or importlib.util.find_spec("jax") is not None]
    if len(os.sched_getaffinity(0)) < 2:
        sys.exit("xla_threads.py compares one thread with two: this process may use one core.")
    runs = {(engine, threads): [] for engine in engines for threads in (1, 2)}
    for _ in range(args.rounds):
        for engine, threads in runs:
            runs[engine, threads].append(measure(engine, threads))
    print(f"Microseconds a matmul (rows x inner x outer), median of {args.rounds} round(s); "
          f"'1 / 2': on one thread / on two.\n")
    shapes = list(runs[engines[0], 1][0])
    print(f"{'':16s}" + "".join(f"{shape:>19s}" for shape in shapes))
    for engine in engines:
        cells = []
        for shape in shapes:
            one, two = (np.median([found[shape] for found in runs[engine, threads]])
                        for threads in (1, 2))
            cells.append(f"{one:7.1f} / {two:7.1f}  ")
        print(f"{engine:16s}" + "".join(f"{cell:>19s}" for cell in cells))


if __name__ == "__main__":
    main()
