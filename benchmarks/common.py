"""Helpers the benchmarks share: the machine's matmul peak, timing, FLOP
counts of the Transformer, and an equivalent PyTorch model built from
`torch.nn.Transformer` (PyTorch is installed only for the benchmarks:
`pip install torch==2.13.0`)."""

import multiprocessing
import os
import platform
import string
import time

import numpy as np


def machine():
    return f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores"


def timed(step, warmup, repeats):
    """Median seconds of `step()` after `warmup` calls."""
    return timed_interleaved({"step": step}, warmup, repeats)["step"]


def timed_interleaved(runs, warmup, repeats, clock=time.perf_counter, pause=0.0):
    """Median seconds of each callable in the dict `runs`, timed in turns
    (every run once, then again, `repeats` times) so that a slow phase of a
    shared machine slows every contender alike instead of one of them.
    `clock=time.process_time` counts this process's CPU time instead of
    the wall clock's: on a machine others load, the work of a contender
    that runs on one thread, which its latency is on an idle machine.
    `pause`: seconds of sleep after each call, outside the clock, so that
    a contender's threads that spin after their work (OpenMP's, about 200
    ms) do not take the cores from the next one: each call then finds the
    machine idle, as a lone request does."""
    for run in runs.values():
        for _ in range(warmup):
            run()
    times = {name: [] for name in runs}
    for _ in range(repeats):
        for name, run in runs.items():
            start = clock()
            run()
            times[name].append(clock() - start)
            time.sleep(pause)
    return {name: float(np.median(values)) for name, values in times.items()}


def matmul_peak_run(framework="tensorflow", dtype="float32", sizes=(1024, 2048, 4096),
                    seconds=0.5):
    """`(run, flops)`: a callable that multiplies square matrices of the
    size at which `framework` ("tensorflow" or "torch") is fastest among
    `sizes`, about `seconds` long, and the FLOPs it does. Time `run` with
    `timed_interleaved` among the steps it is the peak for, so that the peak
    and the steps see the same phases of a shared machine (its speed drifts
    by up to 30% between minutes)."""
    square = {"tensorflow": _tf_square_matmul, "torch": _torch_square_matmul,
              "jax": _jax_square_matmul}[framework]
    matmuls = {size: square(size, dtype) for size in sizes}
    rates = {size: 2 * size**3 / timed(matmul, 2, 5) for size, matmul in matmuls.items()}
    size = max(rates, key=rates.get)
    count = max(1, round(seconds * rates[size] / (2 * size**3)))
    once = matmuls[size]

    def run():
        for _ in range(count):
            once()

    return run, count * 2 * size**3


def _tf_square_matmul(size, dtype):
    import tensorflow as tf

    a = tf.Variable(tf.cast(tf.random.normal([size, size]), dtype))
    b = tf.Variable(tf.cast(tf.random.normal([size, size]), dtype))
    matmul = tf.function(lambda: tf.reduce_sum(tf.cast(tf.matmul(a, b), tf.float32)))
    return lambda: matmul().numpy()


def _torch_square_matmul(size, dtype):
    import torch

    torch.set_num_threads(os.cpu_count())
    a, b = (torch.randn(size, size, dtype=getattr(torch, dtype)) for _ in range(2))
    return lambda: float((a @ b)[0, 0])


def _jax_square_matmul(size, dtype):
    import jax

    a, b = (jax.random.normal(jax.random.key(seed), (size, size), dtype) for seed in (0, 1))
    matmul = jax.jit(lambda a, b: (a @ b)[0, 0])
    return lambda: float(matmul(a, b))


def training_flops(config, vocab, batch, source_length, target_length):
    """Matmul FLOPs of one training step (forward and backward, 3x forward),
    counting the full padded shapes: projections, feed-forward, attention
    scores and weighted sums, and the tied output projection."""
    d, f = config.d_model, config.d_ff
    hk, hv = config.num_heads * config.head_key_dim, config.num_heads * config.head_value_dim
    s, t = batch * source_length, batch * target_length

    def attention(queries, keys, query_len, key_len):
        projections = queries * d * hk + keys * d * (hk + hv) + queries * hv * d
        scores = batch * query_len * key_len * (hk + hv)
        return 2 * (projections + scores)

    encoder = config.num_encoder_layers * (
        attention(s, s, source_length, source_length) + 2 * s * 2 * d * f)
    decoder = config.num_decoder_layers * (
        attention(t, t, target_length, target_length)
        + attention(t, s, target_length, source_length) + 2 * t * 2 * d * f)
    logits = 2 * t * d * vocab
    return 3 * (encoder + decoder + logits)


def torch_transformer(config, vocab):
    """The same model in PyTorch: shared embedding scaled by sqrt(d_model),
    sinusoidal positions, `nn.Transformer` (post-norm, ReLU) and tied
    logits."""
    import math

    import torch

    class Model(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.embedding = torch.nn.Embedding(vocab, config.d_model, padding_idx=0)
            self.transformer = torch.nn.Transformer(
                d_model=config.d_model, nhead=config.num_heads,
                num_encoder_layers=config.num_encoder_layers,
                num_decoder_layers=config.num_decoder_layers,
                dim_feedforward=config.d_ff, dropout=config.dropout, batch_first=True)
            self.dropout = torch.nn.Dropout(config.dropout)
            self.scale = math.sqrt(config.d_model)

        def positions(self, length, device):
            position = torch.arange(length, dtype=torch.float32, device=device)[:, None]
            frequency = torch.pow(10000.0, -torch.arange(0, config.d_model, 2, device=device)
                                  / config.d_model)
            table = torch.zeros(length, config.d_model, device=device)
            table[:, 0::2] = torch.sin(position * frequency)
            table[:, 1::2] = torch.cos(position * frequency)
            return table

        def embed(self, ids):
            return self.dropout(self.embedding(ids) * self.scale
                                + self.positions(ids.shape[1], ids.device))

        def forward(self, source, target):
            causal = torch.nn.Transformer.generate_square_subsequent_mask(
                target.shape[1], device=target.device)
            hidden = self.transformer(
                self.embed(source), self.embed(target), tgt_mask=causal, tgt_is_causal=True,
                src_key_padding_mask=source == 0, memory_key_padding_mask=source == 0)
            return hidden @ self.embedding.weight.T

    return Model()


def model_running_to_the_limit(config, vocab):
    """A randomly initialised `Transformer` whose end token never wins before
    the length limit (its embedding is zero, so its logit is 0, below the best
    of many random logits): every search then decodes the same number of
    steps, as Hugging Face's `min_new_tokens` does."""
    import tensorflow as tf

    from keras_transformer.data import EOS_ID
    from keras_transformer.models import transformer

    model = transformer(config, vocab)
    embeddings = model.get_layer("shared_embedding").embeddings
    embeddings.assign(tf.tensor_scatter_nd_update(
        embeddings, [[EOS_ID]], tf.zeros([1, config.d_model])))
    return model


def word_tokenizer(vocab, folder, seed=0):
    """`(tokenizer, words)`: a SentencePiece word model of exactly `vocab`
    ids whose pieces are random 7-letter words, trained into `folder`, so
    that a text benchmark controls its token counts exactly (a sentence of
    n of these words is n tokens, and any output id is a word)."""
    from keras_transformer.data import train_tokenizer

    rng = np.random.default_rng(seed)
    words = set()
    while len(words) < vocab - 4:  # the special ids 0-3 take the rest
        words.add("".join(rng.choice(list(string.ascii_lowercase), 7)))
    words = sorted(words)
    lines = (" ".join(words[i:i + 20]) for i in range(0, len(words), 20))
    tokenizer = train_tokenizer(lines, os.path.join(folder, "tokenizer.model"), vocab,
                                model_type="word")
    return tokenizer, words


def onnxruntime_options(threads=None):
    """Session options for timing onnxruntime in turns with TensorFlow:
    without spin-waiting, whose busy threads (onnxruntime's default) keep
    the cores after a call returns and slow the contender timed next; on
    this shared 2-core VM they also made onnxruntime itself 2x slower at
    batch 16 when other work was running."""
    import onnxruntime

    options = onnxruntime.SessionOptions()
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    if threads:
        options.intra_op_num_threads = threads
    return options


def in_fresh_process(function, *args):
    """Runs `function(*args)` (a module-level function) in a new Python
    process. For the ONNX conversions: tf2onnx takes about 12 GB converting
    the base model and does not give it back, which next to the models a
    benchmark holds ran this 23 GB machine out of memory."""
    process = multiprocessing.get_context("spawn").Process(target=function, args=args)
    process.start()
    process.join()
    if process.exitcode:
        raise RuntimeError(f"{function.__name__} failed in its process "
                           f"(exit code {process.exitcode}).")


def ding_work_folder(work, vocab_size=8000, shards=8):
    """The folders the corpus benchmarks share, made in `work` when missing:
    `tokenizer/` (an 8,000-piece SentencePiece model trained on the Ding
    dictionary as `examples/train.py` trains one, and the small preset's
    config.json, whose max_length prepare_data.py takes) and `prepared/`
    (Ding prepared with it by prepare_data.py, in this process). Needs
    Debian's trans-de-en. Returns `(tokenizer folder, prepared folder)`."""
    from keras_transformer import data, run_folder
    from keras_transformer.models import SMALL
    from keras_transformer.pipelines.prepare_data import prepare_data

    tokenizer_dir = os.path.join(work, "tokenizer")
    corpus = data.corpus("ding")
    if not os.path.exists(os.path.join(tokenizer_dir, data.tokenizer.MODEL_FILE)):
        os.makedirs(tokenizer_dir, exist_ok=True)
        data.train_corpus_tokenizer(corpus, os.path.join(tokenizer_dir, data.tokenizer.MODEL_FILE),
                                    vocab_size)
        with open(os.path.join(tokenizer_dir, "config.json"), "w") as file:
            file.write(SMALL.to_json())
    prepared_dir = os.path.join(work, "prepared")
    if not os.path.exists(prepared_dir):
        print(f"Preparing Ding in {prepared_dir} ...", flush=True)
        prepare_data(corpus, run_folder.load_tokenizer(tokenizer_dir), prepared_dir, shards,
                     SMALL.max_length)
    return tokenizer_dir, prepared_dir
