"""Label-smoothed cross-entropy over real tokens (paper section 5.4), and the
unsmoothed metrics to report beside it.

With smoothing eps over a vocabulary of V tokens, the target distribution is
q = (1 - eps) * onehot(y) + eps / V, and the loss of one token is

    -sum_k q_k log p_k = (1 - eps) * (-log p_y) + eps * mean_k(-log p_k).

Since -log p_k = logsumexp(z) - z_k for logits z, and -log p_y = nll, this is

    nll + eps * (z_y - mean_k z_k),

which needs only the fused sparse cross-entropy kernel and one mean over the
vocabulary, instead of materialising log-probabilities of shape
(batch, length, V): on a 37,000-token vocabulary the loss is a large part of
a training step's memory traffic.

Padding (label `pad_id`: 0 for this package's models, the model config's
`pad_id` for imported ones) contributes nothing and is not counted.
"""

import keras
from keras import ops

from keras_transformer.models import PAD_ID


def per_token_losses(labels, logits, label_smoothing):
    """`(smoothed, nll)`, float32 `(batch, length)`, padding not yet masked."""
    logits = ops.cast(logits, "float32")
    nll = ops.sparse_categorical_crossentropy(labels, logits, from_logits=True)
    if not label_smoothing:
        return nll, nll
    target_logit = ops.squeeze(ops.take_along_axis(logits, ops.expand_dims(labels, -1), axis=-1), -1)
    smoothed = nll + label_smoothing * (target_logit - ops.mean(logits, axis=-1))
    return smoothed, nll


def token_statistics(labels, logits, label_smoothing, pad_id=PAD_ID):
    """Sums over the real tokens of a batch.

    Returns:
        A dict of float32 scalars: `loss` (label-smoothed), `nll` (plain
        negative log-likelihood), `correct` (argmax hits) and `tokens`.
    """
    smoothed, nll = per_token_losses(labels, logits, label_smoothing)
    real = ops.cast(ops.not_equal(labels, pad_id), "float32")
    predicted = ops.cast(ops.argmax(logits, axis=-1), labels.dtype)
    hits = ops.cast(ops.equal(predicted, labels), "float32")
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
        smoothed, _ = per_token_losses(y_true, y_pred, self.label_smoothing)
        real = ops.cast(ops.not_equal(y_true, self.pad_id), "float32")
        elements = ops.cast(ops.size(y_true), "float32")
        return smoothed * real * elements / ops.maximum(ops.sum(real), 1.0)

    def get_config(self):
        return super().get_config() | {"label_smoothing": self.label_smoothing,
                                       "pad_id": self.pad_id}
