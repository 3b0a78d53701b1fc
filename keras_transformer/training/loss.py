"""Label-smoothed cross-entropy over real tokens (paper section 5.4), and the
unsmoothed metrics to report beside it, in one pass over the logits.

With smoothing eps over a vocabulary of V tokens, the target distribution is
q = (1 - eps) * onehot(y) + eps / V, and the loss of one token is

    -sum_k q_k log p_k = (1 - eps) * (-log p_y) + eps * mean_k(-log p_k).

Since -log p_k = logsumexp(z) - z_k for logits z, and -log p_y = nll, this is

    nll + eps * (z_y - mean_k z_k),

and its gradient with respect to the logits is p - q. So every statistic of
a token comes from four numbers of its row of logits, the maximum, the
log-sum-exp, the mean and the target's logit, which a compiler computes
reading the row once or twice (XLA fuses the three reductions that read it);
the accuracy is "the target's logit is the row's maximum", with no second
argmax pass over the vocabulary. The gradient is written out
(`keras.ops.custom_gradient`, on every backend) as one element-wise
expression, p - q, in the logits' own dtype (bfloat16 under
mixed_bfloat16), instead of what automatic differentiation makes of the
forward pass: the sum of the gradients of the log-softmax, of the mean and
of the target's gather, the last a scatter into a zero-filled float32
tensor of the logits' full size. With 25,600 target tokens and a
37,000-way vocabulary that tensor alone is 3.8 GB of memory traffic a step.
(`benchmarks/train_throughput.py --analyze` shows the effect on XLA's cost
and memory figures.)

Padding (label `pad_id`: 0 for this package's models, the model config's
`pad_id` for imported ones) contributes nothing and is not counted.
"""

import keras
from keras import ops

from keras_transformer.models import PAD_ID


def per_token_statistics(labels, logits, label_smoothing):
    """`(smoothed, nll, hits)`, float32 `(batch, length)` each, padding not
    yet masked: the label-smoothed loss, the plain negative log-likelihood
    and 1.0 where the label's logit is the largest of its row (on a tie the
    label counts as predicted: an argmax picks one of the tied tokens, this
    counts the label as that one; ties of float32 logits are rare, of
    bfloat16 ones less so). `smoothed` and `nll` differentiate with respect
    to `logits` (the gradient in the logits' dtype), `hits` does not."""
    labels = ops.cast(labels, "int32")

    # One output, a function of the logits and labels only: what Keras'
    # custom gradient takes on every backend (on PyTorch it passes one
    # upstream gradient, and autograd keeps tensors alone);
    # `label_smoothing`, a Python float, is a constant in it.
    @ops.custom_gradient
    def statistics(logits, labels):
        values = ops.cast(logits, "float32")  # element by element, fused into each reduction
        largest = ops.max(values, axis=-1)
        log_normaliser = largest + ops.log(
            ops.sum(ops.exp(values - largest[..., None]), axis=-1))
        target = ops.squeeze(ops.take_along_axis(values, labels[..., None], axis=-1), -1)
        nll = log_normaliser - target
        smoothed = nll + label_smoothing * (target - ops.mean(values, axis=-1)) \
            if label_smoothing else nll
        hits = ops.cast(ops.greater_equal(target, largest), "float32")

        def gradient(*arguments, upstream=None):
            # d smoothed / dz = p - (1 - eps) onehot(y) - eps / V and
            # d nll / dz = p - onehot(y): one expression, with a coefficient
            # of each term per token. (PyTorch passes the inputs, then the
            # upstream gradient by name; JAX and TensorFlow that alone.)
            upstream = arguments[0] if upstream is None else upstream
            d_smoothed, d_nll = upstream[0], upstream[1]
            vocabulary = ops.shape(values)[-1]
            of_softmax = (d_smoothed + d_nll)[..., None]
            of_label = (d_smoothed * (1.0 - label_smoothing) + d_nll)[..., None]
            uniform = (d_smoothed * (label_smoothing / vocabulary))[..., None]
            is_label = ops.equal(labels[..., None], ops.arange(vocabulary, dtype="int32"))
            softmax = ops.exp(values - log_normaliser[..., None])
            d_logits = of_softmax * softmax - ops.where(is_label, of_label, 0.0) - uniform
            return ops.cast(d_logits, logits.dtype), None

        return ops.stack([smoothed, nll, hits]), gradient

    smoothed, nll, hits = ops.unstack(statistics(logits, labels), 3)
    return smoothed, nll, hits


def token_statistics(labels, logits, label_smoothing, pad_id=PAD_ID):
    """Sums over the real tokens of a batch.

    Returns:
        A dict of float32 scalars: `loss` (label-smoothed), `nll` (plain
        negative log-likelihood), `correct` (tokens whose label has the
        largest logit) and `tokens`.
    """
    smoothed, nll, hits = per_token_statistics(labels, logits, label_smoothing)
    real = ops.cast(ops.not_equal(labels, pad_id), "float32")
    return {
        "loss": ops.sum(smoothed * real),
        "nll": ops.sum(nll * real),
        "correct": ops.sum(hits * real),
        "tokens": ops.sum(real),
    }


@keras.saving.register_keras_serializable(package="keras_transformer")
class LabelSmoothedCrossEntropy(keras.losses.Loss):
    """Mean label-smoothed cross-entropy per real target token, for `compile`.

    `y_true` holds token ids (`pad_id` = padding), `y_pred` logits. Keras divides the
    per-element values it gets by the number of elements; they are scaled here
    by elements / real tokens so that the result is the mean over real tokens
    while Keras' own scaling for distribution still applies.
    """

    def __init__(self, label_smoothing=0.1, pad_id=PAD_ID, name="label_smoothed_cross_entropy",
                 **kwargs):
        super().__init__(name=name, **kwargs)
        if not 0.0 <= label_smoothing < 1.0:
            raise ValueError(f"label_smoothing must be in [0, 1); got {label_smoothing}.")
        self.label_smoothing = label_smoothing
        self.pad_id = pad_id

    def call(self, y_true, y_pred):
        y_true = ops.cast(y_true, "int32")
        smoothed, _, _ = per_token_statistics(y_true, y_pred, self.label_smoothing)
        real = ops.cast(ops.not_equal(y_true, self.pad_id), "float32")
        elements = ops.cast(ops.size(y_true), "float32")
        return smoothed * real * elements / ops.maximum(ops.sum(real), 1.0)

    def get_config(self):
        return super().get_config() | {"label_smoothing": self.label_smoothing,
                                       "pad_id": self.pad_id}
