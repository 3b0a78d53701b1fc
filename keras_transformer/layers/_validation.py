"""Argument checks shared by the layers, so each error names what to change."""


def check_positive_int(name, value):
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"`{name}` must be a positive integer; got {value!r}.")


def check_non_negative_int(name, value):
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"`{name}` must be an integer >= 0; got {value!r}.")


def check_rate(name, value):
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0.0 <= value < 1.0:
        raise ValueError(f"`{name}` must be a number in [0, 1); got {value!r}.")


def head_size(key_dim, model_dim, num_heads):
    """d_k: `key_dim` when given, else d_model / h, which must divide."""
    if key_dim is not None:
        check_positive_int("key_dim", key_dim)
        return key_dim
    if model_dim % num_heads:
        raise ValueError(
            f"d_model={model_dim} is not divisible by num_heads={num_heads}; "
            "choose a d_model that is a multiple of num_heads or give key_dim."
        )
    return model_dim // num_heads
