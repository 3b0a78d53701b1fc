"""Reading a checkpoint's tensors without pickle, and putting the
encoder-decoder layers of the Hugging Face (BART-family) layout into our
`Transformer`.

Marian (OPUS-MT) and FSMT (fairseq's WMT19 models) name their layers the same
way in `transformers`: `model.encoder.layers.{i}.self_attn.{q,k,v,out}_proj`,
`self_attn_layer_norm`, `fc1`, `fc2`, `final_layer_norm`, and in the decoder
also `encoder_attn` and `encoder_attn_layer_norm`, with PyTorch's `(out, in)`
matrices. Both are post-norm, like the paper, so each layer maps onto ours
one weight for one weight. The key projections' biases are left out: our
attention has none, and dropping it is exact (it adds `q . b_k` to every
logit of a query row, which the softmax cancels).

This module is plain Python and NumPy (no TensorFlow at import).
"""

import json
import os

import numpy as np

SAFETENSORS = "model.safetensors"
SAFETENSORS_INDEX = "model.safetensors.index.json"
PYTORCH_PICKLE = "pytorch_model.bin"


def read_checkpoint(directory, allow_pytorch_pickle=False):
    """All tensors of a Hugging Face model folder as float32 NumPy arrays.

    Reads `model.safetensors` (or the shards its index names) with the
    `safetensors` package's NumPy API, which never unpickles. A folder with
    only `pytorch_model.bin` (a pickle) is refused unless
    `allow_pytorch_pickle`, in which case PyTorch reads it with
    `weights_only=True` (tensors only, no code).

    Raises:
        ValueError: no weights file, a corrupt one, or a pickle-only folder.
    """
    from safetensors import SafetensorError
    from safetensors.numpy import load_file

    single, index = os.path.join(directory, SAFETENSORS), os.path.join(directory, SAFETENSORS_INDEX)
    if os.path.isfile(single):
        paths = [single]
    elif os.path.isfile(index):
        try:
            with open(index) as file:
                shards = sorted(set(json.load(file)["weight_map"].values()))
        except (OSError, ValueError, KeyError, TypeError) as error:
            raise ValueError(f"Cannot read {index}: {error}.") from None
        paths = [os.path.join(directory, shard) for shard in shards]
    elif os.path.isfile(os.path.join(directory, PYTORCH_PICKLE)):
        return _read_pytorch_pickle(os.path.join(directory, PYTORCH_PICKLE), allow_pytorch_pickle)
    else:
        raise ValueError(f"No weights in {directory}: expected {SAFETENSORS} (a model published "
                         f"only as {PYTORCH_PICKLE} needs --allow-pytorch-pickle).")
    tensors = {}
    for path in paths:
        try:
            loaded = load_file(path)
        except (SafetensorError, OSError, ValueError) as error:
            raise ValueError(f"Cannot read {path}: {error} (is the file complete?).") from None
        tensors.update(loaded)
    return {name: np.asarray(value, np.float32) for name, value in tensors.items()}


def _read_pytorch_pickle(path, allowed):
    if not allowed:
        raise ValueError(
            f"{path} is a pickle, which this package does not load by default. Convert it "
            "with transformers (AutoModelForSeq2SeqLM.from_pretrained(folder).save_pretrained("
            "folder, safe_serialization=True)), or pass --allow-pytorch-pickle "
            "(allow_pytorch_pickle=True) to read it with PyTorch's weights_only=True loader."
        )
    try:
        import torch
    except ImportError:
        raise ValueError(
            f"Reading {path} needs PyTorch (pip install torch); or convert it to "
            "model.safetensors first."
        ) from None
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as error:  # torch raises many types for a corrupt or unsafe file
        raise ValueError(f"Cannot read {path} with weights_only=True: {error}") from None
    return {name: value.float().numpy() for name, value in state.items()}


def take(checkpoint, name, used):
    """`checkpoint[name]`, recorded in the set `used`; a clear error if absent."""
    if name not in checkpoint:
        raise ValueError(f"The checkpoint has no tensor {name!r}.")
    used.add(name)
    return checkpoint[name]


def layer_weights(checkpoint, num_encoder_layers, num_decoder_layers, prefix="model."):
    """Our layer weight paths -> arrays, from the BART-family layout.

    Returns `(weights, used)`: a dict keyed by our weight paths
    (`encoder_layer_0/self_attention/query/kernel`, ...), and the set of
    checkpoint names it read (key biases included, which it drops).
    """
    weights, used = {}, set()

    def dense(ours, theirs, bias=True):
        weights[f"{ours}/kernel"] = take(checkpoint, f"{theirs}.weight", used).T
        if bias:
            weights[f"{ours}/bias"] = take(checkpoint, f"{theirs}.bias", used)

    def norm(ours, theirs):
        weights[f"{ours}/gamma"] = take(checkpoint, f"{theirs}.weight", used)
        weights[f"{ours}/beta"] = take(checkpoint, f"{theirs}.bias", used)

    def attention(ours, theirs):
        dense(f"{ours}/query", f"{theirs}.q_proj")
        dense(f"{ours}/key", f"{theirs}.k_proj", bias=False)
        take(checkpoint, f"{theirs}.k_proj.bias", used)  # dropped: the softmax cancels it
        dense(f"{ours}/value", f"{theirs}.v_proj")
        dense(f"{ours}/attention_output", f"{theirs}.out_proj")

    sides = (("encoder", num_encoder_layers), ("decoder", num_decoder_layers))
    for side, count in sides:
        for i in range(count):
            ours, theirs = f"{side}_layer_{i}", f"{prefix}{side}.layers.{i}"
            attention(f"{ours}/self_attention", f"{theirs}.self_attn")
            norm(f"{ours}/self_attention_norm", f"{theirs}.self_attn_layer_norm")
            if side == "decoder":
                attention(f"{ours}/cross_attention", f"{theirs}.encoder_attn")
                norm(f"{ours}/cross_attention_norm", f"{theirs}.encoder_attn_layer_norm")
            dense(f"{ours}/feed_forward/inner", f"{theirs}.fc1")
            dense(f"{ours}/feed_forward/output", f"{theirs}.fc2")
            norm(f"{ours}/feed_forward_norm", f"{theirs}.final_layer_norm")
    return weights, used


def assign(model, weights):
    """Sets every weight of `model` from `weights` (keyed by weight path).

    Raises:
        ValueError: a weight is missing, left over, or of another shape.
    """
    ours = {weight.path: weight for weight in model.weights}
    missing, extra = sorted(set(ours) - set(weights)), sorted(set(weights) - set(ours))
    if missing or extra:
        raise ValueError(f"The checkpoint does not fit the model: missing {missing[:5]}, "
                         f"unexpected {extra[:5]}.")
    for path, weight in ours.items():
        if tuple(weight.shape) != weights[path].shape:
            raise ValueError(f"The checkpoint's {path} has shape {weights[path].shape}; the "
                             f"model built from its config needs {tuple(weight.shape)}.")
    for path, weight in ours.items():
        weight.assign(weights[path])


def check_all_used(checkpoint, used, ignorable=()):
    """Refuses a checkpoint with tensors the import would silently drop
    (a part of the architecture we do not represent)."""
    left = sorted(name for name in set(checkpoint) - set(used)
                  if not any(part in name for part in ignorable))
    if left:
        raise ValueError(f"The checkpoint has tensors this architecture does not use: "
                         f"{left[:5]}{' ...' if len(left) > 5 else ''}.")
