"""Pictures of a run: its loss curves, and attention maps for a sentence as
in the paper's appendix (Figures 3 to 5). Written as PNG files with
matplotlib (no display needed)."""

import json

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402


def plot_training_curves(metrics_path, output_path):
    """Training and validation loss (label-smoothed, per token) and validation
    chrF and BLEU against the update step, from a run's `metrics.jsonl`."""
    with open(metrics_path) as lines:
        rows = [json.loads(line) for line in lines if line.strip()]
    if not rows:
        raise ValueError(f"{metrics_path} holds no logged epochs yet.")
    steps = [row["step"] for row in rows]
    figure, (losses, scores) = plt.subplots(1, 2, figsize=(11, 4))
    losses.plot(steps, [row["loss"] for row in rows], marker="o",
                label="training (mean since the last point)")
    if "val_loss" in rows[0]:
        losses.plot(steps, [row["val_loss"] for row in rows], marker="o", label="validation")
    losses.set(xlabel="update", ylabel="label-smoothed cross-entropy per token", title="Loss")
    losses.legend()
    losses.grid(alpha=0.3)
    for key, label in (("val_chrf", "chrF"), ("val_bleu", "BLEU")):
        if key in rows[0]:
            scores.plot(steps, [row[key] for row in rows], marker="o", label=label)
    scores.set(xlabel="update", ylabel="score (greedy, validation sample)", title="Validation scores")
    scores.legend()
    scores.grid(alpha=0.3)
    figure.tight_layout()
    figure.savefig(output_path, dpi=110)
    plt.close(figure)
    return output_path


def plot_attention(model, tokenizer, source, translation, output_path, layer=-1, heads=None):
    """Attention maps of one layer for a sentence and its translation.

    `layer` is a 0-based index (negative counts from the last layer), taken
    in the encoder for the first row and in the decoder for the others.

    Rows: encoder self-attention (source over source), decoder
    self-attention (translation over translation, causal) and encoder-decoder
    attention (translation over source); columns: the chosen heads (default:
    all, up to 8). Darker means more weight.
    """
    source_ids = list(tokenizer.tokenize(tf.constant([source]))[0].numpy()) + [tokenizer.eos_id]
    target_ids = list(tokenizer.tokenize_target(tf.constant([translation]))[0].numpy())
    target_in = [tokenizer.bos_id] + target_ids
    weights = model.attention_weights(np.array([source_ids], "int32"), np.array([target_in], "int32"))
    heads = list(range(min(model.config.num_heads, 8))) if heads is None else list(heads)
    if not heads or not all(0 <= head < model.config.num_heads for head in heads):
        raise ValueError(f"heads must be indexes in [0, {model.config.num_heads}), got {heads}.")
    source_labels = tokenizer.pieces(source_ids[:-1]) + ["</s>"]
    target_labels = ["<s>"] + tokenizer.target_pieces(target_ids)
    kinds = [("encoder_self", "encoder self-attention", source_labels, source_labels),
             ("decoder_self", "decoder self-attention", target_labels, target_labels),
             ("cross", "encoder-decoder attention", target_labels, source_labels)]
    size = max(len(source_labels), len(target_labels))
    figure, axes = plt.subplots(len(kinds), len(heads), squeeze=False,
                                figsize=(2.6 * len(heads) + 1, 2.6 * len(kinds) * max(1, size / 12)))
    for row, (key, title, rows, columns) in enumerate(kinds):
        layer_index = layer % len(weights[key])  # the encoder may be deeper or shallower
        maps = np.asarray(weights[key][layer_index])[0]
        for column, head in enumerate(heads):
            axis = axes[row, column]
            axis.imshow(maps[head], cmap="Blues", vmin=0.0, vmax=1.0)
            axis.set_xticks(range(len(columns)), columns, rotation=90, fontsize=7)
            axis.set_yticks(range(len(rows)), rows, fontsize=7)
            axis.set_title(f"{title}\nlayer {layer_index + 1}, head {head + 1}", fontsize=8)
    figure.suptitle(f"{source}  ->  {translation}", fontsize=10)
    figure.tight_layout()
    figure.savefig(output_path, dpi=110)
    plt.close(figure)
    return output_path
