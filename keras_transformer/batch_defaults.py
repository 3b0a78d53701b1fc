"""How sentences are batched for translation by default, in plain Python
(no TensorFlow), so that `translate`, `translate-corpus` and the Beam
pipeline's workers read the same defaults as `decoding.Translator` without
loading TensorFlow: the defaults, how the searches share the cores, and
`length_batches`, the cut of a list of sentences into batches."""

import os
import sys

import numpy as np

DEFAULT_WINDOW = 4096
"""Sentences a stream is read ahead, sorted and batched by (`Translator.translate_stream`)."""


DEFAULT_IN_FLIGHT = 2
"""Searches a `Translator` (and translate-corpus's SavedModel runtime,
`pipelines.export_handler.ExportModelHandler`) runs at once, on threads:
while one is in Python (between steps, or gathering and detokenizing a
result) the other uses the cores, so two give more tokens a second than one
(`benchmarks/translate_file.py --in-flight 1 2`; docs/benchmarks-log.md,
"Whole files")."""


def share_cores(in_flight=DEFAULT_IN_FLIGHT):
    """Gives each of `in_flight` searches its share of this process's cores:
    sets TensorFlow's threads per operation (`TF_NUM_INTRAOP_THREADS`, which
    TensorFlow reads when its runtime starts) to cores // in_flight, at least
    1, unless it is set already. Returns the value in force.

    Searches in flight already keep every core busy; each of their
    operations split over all the cores (TensorFlow's default) only adds
    hand-offs between threads, which cost most in a decoding step's small
    matrices: with two searches in flight on 2 cores, one thread per
    operation gave more tokens a second than all the cores, for beam and
    greedy search alike. Call it before TensorFlow runs its first operation
    (the `translate` and `evaluate` commands do); later it changes nothing.

    Raises:
        ValueError: `TF_NUM_INTRAOP_THREADS` is set to something other than
            a whole number.
    """
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        cores = os.cpu_count() or 1
    value = os.environ.setdefault("TF_NUM_INTRAOP_THREADS", str(max(1, cores // in_flight)))
    if not value.strip().isdigit():
        raise ValueError(f"TF_NUM_INTRAOP_THREADS must be a whole number of threads per "
                         f"TensorFlow operation (0: all the cores); got {value!r}.")
    return int(value)


def decoding_kernels(precision=None):
    """Has TensorFlow run a float32 search on its own (Eigen) kernels
    instead of oneDNN's: sets `TF_ENABLE_ONEDNN_OPTS=0`, which TensorFlow
    reads when it is imported, unless the environment sets it already.
    Returns whether oneDNN's kernels are off.

    A bfloat16 or float16 search (`precision`) keeps TensorFlow's own
    choice, `cpu_features.onednn_enabled`: oneDNN where the CPU has the
    neural-network features (AVX-512 BF16 or VNNI, AMX), whose bfloat16
    kernels are oneDNN's and native there; Eigen's elsewhere. On an AVX2
    CPU without them (a 2-core EPYC Zen 3), turning oneDNN on for a
    bfloat16 search was no faster: the whole translate command on 300 Ding
    sentences took 24.9 s with Eigen's kernels, 26.3 s with oneDNN's
    (`benchmarks/decoding_kernels.py`; float32: 22.6 s either way at that
    size, where start-up is most of it).

    A search's operations are small (a beam step multiplies 4 rows by
    256 x 256 matrices), and oneDNN's setup of each call costs more than
    the arithmetic: on a 2-core Xeon (AVX-512, AMX), 37 us a dense matmul,
    72 us an attention matmul and 51 us a softmax of a beam step, where
    Eigen's take 29, 4 and 4 us. With the small preset one Ding sentence
    then took 0.81-0.86x the time and a whole file 0.79-0.85x; at base size
    0.96-1.01x and 0.96x (docs/benchmarks-log.md, "One sentence
    alone"). Only rounding
    changes: 1,000 Ding sentences got the same translations, their
    scores within 1.1e-5 of oneDNN's (a sentence alone and in a batch
    already differ by 6e-6).

    Call it before TensorFlow is imported (`translate`, `evaluate` and
    `serve` do, after parsing); once it is imported, this changes nothing
    and says whether the environment turned oneDNN off.
    """
    if (precision in (None, "float32") and "tensorflow" not in sys.modules
            and "TF_ENABLE_ONEDNN_OPTS" not in os.environ):
        os.environ["TF_ENABLE_ONEDNN_OPTS"] = "0"
    return os.environ.get("TF_ENABLE_ONEDNN_OPTS") == "0"


def default_batch_tokens(beam_size):
    """Source tokens per search, padding included, by beam size: 4,096 for
    greedy search, 2,048 for beam search (K rows a sentence). Chosen by
    measurement (`benchmarks/translate_file.py --batch-tokens 0 2048 4096`,
    with two searches in flight): beam 4 was faster with 2,048 tokens than
    with 1,024, and greedy search slower with 2,048 than with 4,096
    (docs/benchmarks-log.md, "Whole files")."""
    return 4096 if beam_size == 1 else 2048


def length_batches(lengths, batch_tokens, batch_size=None):
    """Cuts sentences into batches of at most `batch_tokens` source tokens,
    padding counted (rows x the longest row), and at most `batch_size`
    sentences: the longest first, so that each batch holds sentences of
    nearly one length (CTranslate2's `batch_type="tokens"`, fairseq's
    `--max-tokens`). A sentence longer than the budget has a batch of its own.

    Args:
        lengths: each sentence's tokens, as the search reads them (end
            token included).

    Returns:
        A list of arrays of indexes into `lengths`.
    """
    order = np.argsort(-np.asarray(lengths, np.int64), kind="stable")
    batches, start = [], 0
    while start < len(order):
        longest = max(int(lengths[order[start]]), 1)
        rows = max(1, batch_tokens // longest)  # later rows are no longer
        if batch_size:
            rows = min(rows, batch_size)
        batches.append(order[start:start + rows])
        start += rows
    return batches
