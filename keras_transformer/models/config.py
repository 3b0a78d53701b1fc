"""`TransformerConfig`: every hyperparameter of a model in one validated value,
the paper's presets, and Table 3's variants as overrides."""

import dataclasses
import json

import keras

from keras_transformer import names
from keras_transformer.layers.positional_encoding import STYLES as SINUSOIDS
from keras_transformer.textfiles import read_json

POSITIONAL_ENCODINGS = ("sinusoidal", "learned")
LEARNING_RATE_DECAYS = ("inverse_sqrt", "linear")


@dataclasses.dataclass(frozen=True)
class TransformerConfig:
    """Hyperparameters of an encoder-decoder Transformer.

    Defaults are the paper's base model (Table 3, first row). Instances are
    immutable and checked on construction; derive variants with `replace`:

    >>> BASE.replace(num_heads=16, key_dim=32, value_dim=32).num_heads
    16

    Attributes:
        num_encoder_layers, num_decoder_layers: N (6 and 6 in the paper).
        d_model: width of every residual stream, embedding and sub-layer output.
        d_ff: inner size of the feed-forward networks.
        num_heads: h.
        key_dim, value_dim: per-head d_k and d_v. `None` means d_model / h,
            which then must divide evenly.
        dropout: P_drop, on every sub-layer output and on the embedding sums.
        attention_dropout: on the attention weights (not in the paper: 0).
        ffn_dropout: on the feed-forward inner activations (not in the paper: 0).
        activation: feed-forward activation; the paper's is "relu".
        label_smoothing: eps_ls of the training loss.
        positional_encoding: "sinusoidal" (the paper) or "learned" (Table 3 E).
        norm_first: False is the paper's post-norm; True is pre-norm.
        shared_vocabulary: source and target share one embedding matrix (the
            paper's shared BPE vocabulary). The target embedding is always tied
            to the pre-softmax projection.
        max_length: the longest sequence, in tokens, the model accepts (the
            size of a learned positional table; also the limit decoding and the
            data pipeline enforce).
        layer_norm_epsilon: epsilon of every LayerNorm.

    Conventions of pretrained checkpoints (`keras_transformer.pretrained`),
    whose defaults are the paper's and this package's own tokenizers':
        sinusoid: which sinusoid table "sinusoidal" positions add: "paper"
            (sine and cosine interleaved), "marian" (all sines, then all
            cosines: Hugging Face's OPUS-MT models), "tensor2tensor" (sines
            first, frequencies spread over d_model / 2 - 1 steps: Marian's
            own releases) or "fairseq" (as tensor2tensor, positions counted
            from `pad_id + 1`: fairseq, FSMT). See
            `SinusoidalPositionalEncoding`.
        scale_embedding: multiply embeddings by sqrt(d_model) (the paper does).
        logits_bias: add a trained bias to the output logits (Marian's
            `final_logits_bias`; the paper has none).
        pad_id, unk_id, decoder_start_id, eos_id: the special token ids.
            Ours are 0, 1, 2, 3; Marian's are pad = the last id, unk = 1,
            start = the pad id, end = 0; fairseq's pad = 1, unk = 3,
            start = end = 2. Padding is masked by `pad_id`; decoding starts
            from `decoder_start_id` and stops at `eos_id`.

    Training recipe (paper section 5), used by `keras_transformer.training`:
        warmup_steps: of the learning-rate schedule (4000).
        learning_rate_scale: multiplies the paper's learning-rate curve.
        learning_rate_decay: after the warmup, "inverse_sqrt" (the paper's)
            or "linear" (to zero at the run's last update; not in the paper,
            see `training.LinearDecaySchedule`).
        adam_beta_1, adam_beta_2, adam_epsilon: 0.9, 0.98, 1e-9.
        batch_tokens: source (and target) tokens per update (about 25,000).
        train_steps: updates (100k for base, 300k for big).
        average_checkpoints: how many of the last checkpoints to average
            (5 for base, 20 for big).

    Decoding (paper section 6.1), the defaults of `keras_transformer.decoding`:
        beam_size: 4.
        length_penalty: alpha of the GNMT length penalty, 0.6.
        decode_margin: the longest output is the input length plus this (50).
    """

    num_encoder_layers: int = 6
    num_decoder_layers: int = 6
    d_model: int = 512
    d_ff: int = 2048
    num_heads: int = 8
    key_dim: int | None = None
    value_dim: int | None = None
    dropout: float = 0.1
    attention_dropout: float = 0.0
    ffn_dropout: float = 0.0
    activation: str = "relu"
    label_smoothing: float = 0.1
    positional_encoding: str = "sinusoidal"
    norm_first: bool = False
    shared_vocabulary: bool = True
    max_length: int = 256
    layer_norm_epsilon: float = 1e-6
    sinusoid: str = "paper"
    scale_embedding: bool = True
    logits_bias: bool = False
    pad_id: int = 0
    unk_id: int = 1
    decoder_start_id: int = 2
    eos_id: int = 3
    warmup_steps: int = 4000
    learning_rate_scale: float = 1.0
    learning_rate_decay: str = "inverse_sqrt"
    adam_beta_1: float = 0.9
    adam_beta_2: float = 0.98
    adam_epsilon: float = 1e-9
    batch_tokens: int = 25000
    train_steps: int = 100_000
    average_checkpoints: int = 5
    beam_size: int = 4
    length_penalty: float = 0.6
    decode_margin: int = 50

    def __post_init__(self):
        for name in ("num_encoder_layers", "num_decoder_layers", "d_model", "d_ff",
                     "num_heads", "max_length", "warmup_steps", "batch_tokens",
                     "train_steps", "average_checkpoints", "beam_size"):
            _require(name, _is_int(getattr(self, name)) and getattr(self, name) >= 1,
                     "a positive integer")
        for name in ("key_dim", "value_dim"):
            value = getattr(self, name)
            _require(name, value is None or (_is_int(value) and value >= 1),
                     "None (meaning d_model / num_heads) or a positive integer")
        if self.key_dim is None and self.d_model % self.num_heads:
            raise ValueError(
                f"TransformerConfig.d_model={self.d_model} is not divisible by "
                f"num_heads={self.num_heads}: d_model must be a multiple of "
                "num_heads, or key_dim (and value_dim) must be given."
            )
        for name in ("dropout", "attention_dropout", "ffn_dropout", "label_smoothing"):
            _require(name, _is_number(getattr(self, name)) and 0.0 <= getattr(self, name) < 1.0,
                     "a number in [0, 1)")
        _require("positional_encoding", self.positional_encoding in POSITIONAL_ENCODINGS,
                 f"one of {POSITIONAL_ENCODINGS}")
        if self.positional_encoding == "sinusoidal":
            _require("d_model", self.d_model % 2 == 0,
                     "even with sinusoidal positional encoding (sines and cosines pair up)")
        try:
            keras.activations.get(self.activation)
        except ValueError:
            _require("activation", False, "the name of a Keras activation such as 'relu'")
        _require("sinusoid", self.sinusoid in SINUSOIDS, f"one of {SINUSOIDS}")
        _require("learning_rate_decay", self.learning_rate_decay in LEARNING_RATE_DECAYS,
                 f"one of {LEARNING_RATE_DECAYS}")
        for name in ("pad_id", "unk_id", "decoder_start_id", "eos_id"):
            _require(name, _is_int(getattr(self, name)) and getattr(self, name) >= 0,
                     "an integer >= 0")
        _require("eos_id", self.eos_id != self.pad_id, "different from pad_id")
        for name in ("norm_first", "shared_vocabulary", "scale_embedding", "logits_bias"):
            _require(name, isinstance(getattr(self, name), bool), "True or False")
        for name in ("layer_norm_epsilon", "adam_epsilon", "learning_rate_scale"):
            _require(name, _is_number(getattr(self, name)) and getattr(self, name) > 0,
                     "a positive number")
        for name in ("adam_beta_1", "adam_beta_2"):
            _require(name, _is_number(getattr(self, name)) and 0 <= getattr(self, name) < 1,
                     "a number in [0, 1)")
        _require("length_penalty", _is_number(self.length_penalty) and self.length_penalty >= 0,
                 "a number >= 0")
        _require("decode_margin", _is_int(self.decode_margin) and self.decode_margin >= 0,
                 "an integer >= 0")
        _require("batch_tokens", self.batch_tokens >= self.max_length,
                 f"at least max_length={self.max_length}, so that a longest pair fits in a batch")

    @property
    def head_key_dim(self):
        """d_k as the layers use it."""
        return self.key_dim or self.d_model // self.num_heads

    @property
    def head_value_dim(self):
        """d_v as the layers use it."""
        return self.value_dim or self.head_key_dim

    @property
    def max_source_tokens(self):
        """The longest source, in subword tokens, before the end token (one
        of `max_length`'s places is kept for it)."""
        return self.max_length - 1

    def replace(self, **overrides):
        """A copy with some fields changed, validated like a new config."""
        unknown = set(overrides) - {f.name for f in dataclasses.fields(self)}
        if unknown:
            raise ValueError(
                f"Unknown TransformerConfig field(s) {sorted(unknown)}; valid fields "
                f"are {[f.name for f in dataclasses.fields(self)]}."
            )
        return dataclasses.replace(self, **overrides)

    def to_dict(self):
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, values):
        """Inverse of `to_dict`; unknown keys are an error, missing keys take
        the base model's defaults."""
        return cls().replace(**values)

    @classmethod
    def parse_overrides(cls, items):
        """`["d_model=256", "norm_first=true"]` -> `{"d_model": 256, "norm_first": True}`,
        each value converted to its field's type (for command lines)."""
        types = {f.name: f.type for f in dataclasses.fields(cls)}
        overrides = {}
        for item in items:
            name, separator, text = item.partition("=")
            if not separator or name not in types:
                raise ValueError(
                    f"Cannot read override {item!r}: expected FIELD=VALUE with FIELD one of "
                    f"{sorted(types)}."
                )
            overrides[name] = _parse_value(name, text, types[name])
        return overrides

    def to_json(self):
        return json.dumps(self.to_dict(), indent=2, sort_keys=True)

    @classmethod
    def from_json(cls, text):
        return cls.from_dict(json.loads(text))

    @classmethod
    def from_file(cls, path):
        """The config in a JSON file (a run's `config.json`), with errors
        that name the file."""
        values = read_json(path)
        if not isinstance(values, dict):
            raise ValueError(f"{path} must hold a JSON object of TransformerConfig fields; the "
                             "file is damaged: restore or recreate it.")
        try:
            return cls.from_dict(values)
        except (ValueError, TypeError) as error:
            raise ValueError(f"{path}: {error}") from None


def _parse_value(name, text, annotation):
    if text.lower() == "none" and "None" in str(annotation):
        return None
    kind = getattr(annotation, "__name__", str(annotation))  # "int", or "int | None"
    try:
        if "bool" in kind:
            if text.lower() not in ("true", "false"):
                raise ValueError
            return text.lower() == "true"
        if "int" in kind:
            return int(text)
        if "float" in kind:
            return float(text)
    except ValueError:
        raise ValueError(f"TransformerConfig.{name} must be {kind}; got {text!r}.") from None
    return text


def _is_int(value):
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value):
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _require(field, ok, allowed):
    if not ok:
        raise ValueError(f"TransformerConfig.{field} must be {allowed}.")


BASE = TransformerConfig()
"""The paper's base model: 6+6 layers, d_model 512, d_ff 2048, 8 heads, P_drop 0.1."""

BIG = BASE.replace(
    d_model=1024, d_ff=4096, num_heads=16, dropout=0.3, train_steps=300_000, average_checkpoints=20
)
"""The paper's big model (dropout 0.3 as for EN-DE; the paper used 0.1 for EN-FR)."""

SMALL = BASE.replace(
    num_encoder_layers=2,
    num_decoder_layers=2,
    d_model=256,
    d_ff=1024,
    num_heads=4,
    dropout=0.0,
    norm_first=True,
    max_length=64,
    warmup_steps=300,
    learning_rate_scale=0.5,
    batch_tokens=2048,
    train_steps=20_000,
)
"""Not in the paper: the CPU preset, tuned to learn as much as it can in the
demo's 15 minutes on 2 cores (Ding German-English). With so little compute a
shallow model that makes many small updates wins: 2+2 layers, pre-norm (stable
at a high learning rate after a short warmup: peak 1.8e-3 at update 300),
2,048-token batches, no dropout (the run sees its data about 2.5 times)."""

PRESETS = dict(zip(names.PRESETS, (BASE, BIG, SMALL)))
"""The presets by name (`names.PRESETS`: base, big, small)."""

TABLE3_VARIANTS = {
    # (A) number of heads at constant computation.
    "A-h1": dict(num_heads=1, key_dim=512, value_dim=512),
    "A-h4": dict(num_heads=4, key_dim=128, value_dim=128),
    "A-h16": dict(num_heads=16, key_dim=32, value_dim=32),
    "A-h32": dict(num_heads=32, key_dim=16, value_dim=16),
    # (B) smaller attention keys (d_v stays 64).
    "B-dk16": dict(key_dim=16, value_dim=64),
    "B-dk32": dict(key_dim=32, value_dim=64),
    # (C) model size.
    "C-N2": dict(num_encoder_layers=2, num_decoder_layers=2),
    "C-N4": dict(num_encoder_layers=4, num_decoder_layers=4),
    "C-N8": dict(num_encoder_layers=8, num_decoder_layers=8),
    "C-d256": dict(d_model=256, key_dim=32, value_dim=32),
    "C-d1024": dict(d_model=1024, key_dim=128, value_dim=128),
    "C-ff1024": dict(d_ff=1024),
    "C-ff4096": dict(d_ff=4096),
    # (D) regularisation.
    "D-drop0.0": dict(dropout=0.0),
    "D-drop0.2": dict(dropout=0.2),
    "D-ls0.0": dict(label_smoothing=0.0),
    "D-ls0.2": dict(label_smoothing=0.2),
    # (E) learned instead of sinusoidal positions.
    "E-learned": dict(positional_encoding="learned"),
}
"""Table 3's rows as overrides of `BASE`: `BASE.replace(**TABLE3_VARIANTS["C-N2"])`."""
