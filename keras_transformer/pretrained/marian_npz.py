"""Marian's own release files (OPUS-MT zips) in Hugging Face's Marian layout.

OPUS-MT publishes its models as Marian writes them: a folder with

- `decoder.yml`: the decoding options, naming the model file (`models:`) and
  the source and target vocabularies (`vocabs:`);
- the model, e.g. `opus.spm32k-spm32k.transformer-align.model1.npz.best-perplexity.npz`:
  a NumPy `.npz` of float32 arrays with Marian's parameter names plus
  `special:model.yml`, the model options as YAML text in an int8 array
  (NUL-terminated; newer Marian pads it with NULs to a multiple of 256 bytes);
- the vocabularies, `*.vocab.yml` (`piece: id` per line, `</s>` = 0 and
  `<unk>` = 1), one shared or a `*.src.vocab.yml` / `*.trg.vocab.yml` pair;
- `source.spm` and `target.spm`, the SentencePiece models that split text
  into those pieces.

`read_marian_release` turns such a folder into exactly what a Hugging Face
Marian folder holds (what `transformers`' own conversion script produced for
the Helsinki-NLP models on the Hub): a `MarianConfig`-style dict, the arrays
`MarianMTModel.save_pretrained` writes (same names, same shapes), and the
vocabulary with `<pad>` appended as a new last id. One mapper then serves
both kinds of folder. `write_hf_tokenizer_files` writes the tokenizer files
(`source.spm`, `target.spm`, `vocab.json`).

Name and layout translation (layer `i` is Marian's `l{i+1}`):

| Marian | Hugging Face | change |
|---|---|---|
| `Wemb` (V, d) | `model.shared.weight` | a zero row appended for `<pad>` |
| `encoder_Wemb` / `decoder_Wemb` (untied source/target) | `model.encoder.embed_tokens.weight` / `model.decoder.embed_tokens.weight` | same |
| `decoder_ff_logit_out_b` (1, V) | `final_logits_bias` | a zero appended for `<pad>`; all zeros under `output-omit-bias` |
| `{enc}_l1_self_W{q,k,v,o}` (in, out) | `...layers.0.self_attn.{q,k,v,out}_proj.weight` | transposed to (out, in) |
| `{enc}_l1_self_b{q,k,v,o}` (1, d) | `...self_attn.{q,k,v,out}_proj.bias` | flattened |
| `{enc}_l1_self_Wo_ln_{scale,bias}` (1, d) | `...self_attn_layer_norm.{weight,bias}` | flattened |
| `decoder_l1_context_*` | `...encoder_attn.*`, `...encoder_attn_layer_norm.*` | as self-attention |
| `{enc}_l1_ffn_W1` (d, ffn), `_W2` (ffn, d) | `...fc1.weight`, `...fc2.weight` | transposed |
| `{enc}_l1_ffn_b1`, `_b2` (1, n) | `...fc1.bias`, `...fc2.bias` | flattened |
| `{enc}_l1_ffn_ffn_ln_{scale,bias}` | `...final_layer_norm.{weight,bias}` | flattened |

(`{enc}` is `encoder` or `decoder`; `Wemb` is the one matrix of
`tied-embeddings-all` or `tied-embeddings-src`.) The output projection is the
target embedding, transposed, in both (`lm_head.weight` is tied, not stored).
Decoder layers tied by `transformer-tied-layers` get one copy per layer.
The positional tables `model.{encoder,decoder}.embed_positions.weight` have
no Marian counterpart (Marian computes its sinusoids) and are not returned:
`transformers` computes them too and does not save them.

What Hugging Face's layout (and this conversion) cannot reproduce exactly,
so that a consumer wanting Marian's own numbers knows where to look:

- Marian's layer-norm epsilon is 1e-6 (`MARIAN_LAYER_NORM_EPSILON`);
  `MarianMTModel` uses PyTorch's default, 1e-5.
- Marian's sinusoids put d/2 sines, then d/2 cosines, of position
  `p` = 0, 1, ... at frequencies 10000^(-i / (d/2 - 1)) (tensor2tensor's
  spacing); `MarianMTModel` uses the same layout at 10000^(-i / (d/2)).
  Both scale the embeddings by sqrt(d) first, and Marian's first decoder
  input is a zero vector, which the zero `<pad>` row reproduces.

Configurations with no Hugging Face Marian equivalent raise `ValueError`
naming the option: pre-norm (`transformer-preprocess` with `n`), layer norm
or skip connections on the embeddings or on top of the stacks, average-
attention or RNN (SSRU) decoders, untied output layers, trained positional
embeddings, factored vocabularies, ensembles, right-to-left models, and the
like. Guided alignment (OPUS-MT's "transformer-align") adds no parameters
(it trains one cross-attention head to follow word alignments), so those
models convert; only Marian's alignment output is not part of the layout.
"""

import dataclasses
import json
import os
import re
import shutil
import zipfile

import numpy as np
import yaml

CONFIG_KEY = "special:model.yml"
MARIAN_LAYER_NORM_EPSILON = 1e-6
PAD = "<pad>"
EOS = "</s>"
UNK = "<unk>"

# Per-layer Marian name suffix -> (Hugging Face suffix, transpose, Marian
# shape with "d" the model width and "f" the feed-forward width).
_ATTENTION = {
    "Wq": ("q_proj.weight", True, ("d", "d")), "bq": ("q_proj.bias", False, (1, "d")),
    "Wk": ("k_proj.weight", True, ("d", "d")), "bk": ("k_proj.bias", False, (1, "d")),
    "Wv": ("v_proj.weight", True, ("d", "d")), "bv": ("v_proj.bias", False, (1, "d")),
    "Wo": ("out_proj.weight", True, ("d", "d")), "bo": ("out_proj.bias", False, (1, "d")),
}
_FFN = {
    "ffn_W1": ("fc1.weight", True, ("d", "f")), "ffn_b1": ("fc1.bias", False, (1, "f")),
    "ffn_W2": ("fc2.weight", True, ("f", "d")), "ffn_b2": ("fc2.bias", False, (1, "d")),
    "ffn_ffn_ln_scale": ("final_layer_norm.weight", False, (1, "d")),
    "ffn_ffn_ln_bias": ("final_layer_norm.bias", False, (1, "d")),
}


def _layer_names(side, marian_layer, hf_layer, d_model, ffn_dim):
    """{Marian name: (HF name, transpose, Marian shape)} for one layer of
    `side` ("encoder" or "decoder"); Marian counts layers from 1, HF from 0."""
    sizes = {"d": d_model, "f": ffn_dim, 1: 1}
    marian = f"{side}_l{marian_layer}_"
    hf = f"model.{side}.layers.{hf_layer}."
    entries = []
    blocks = [("self", "self_attn")] + ([("context", "encoder_attn")] if side == "decoder" else [])
    for marian_block, hf_block in blocks:
        for suffix, (hf_suffix, transpose, shape) in _ATTENTION.items():
            entries.append((f"{marian_block}_{suffix}", f"{hf_block}.{hf_suffix}",
                            transpose, shape))
        for part, hf_part in (("scale", "weight"), ("bias", "bias")):
            entries.append((f"{marian_block}_Wo_ln_{part}", f"{hf_block}_layer_norm.{hf_part}",
                            False, (1, "d")))
    entries += [(suffix, *entry) for suffix, entry in _FFN.items()]
    return {marian + suffix: (hf + hf_suffix, transpose, tuple(sizes[s] for s in shape))
            for suffix, hf_suffix, transpose, shape in entries}


@dataclasses.dataclass(frozen=True)
class MarianRelease:
    """A Marian release folder translated to Hugging Face's Marian layout.

    Attributes:
        directory: the release folder.
        model_file: the `.npz` that `decoder.yml` names.
        config: a `transformers.MarianConfig` dict (`model_type` "marian").
        weights: HF parameter name -> float32 array, HF shapes; exactly the
            tensors `MarianMTModel.save_pretrained` writes.
        source_vocab, target_vocab: piece -> id, `<pad>` appended (HF's
            `vocab.json` / `target_vocab.json`); equal dicts when shared.
        separate_vocabs: the source and target vocabularies differ (HF's
            tokenizer then needs `target_vocab.json`).
        source_spm, target_spm: the SentencePiece models, or None when the
            folder has none (the weights do not need them).
        marian_config: the `special:model.yml` options, as strings.
        decoder_options: `decoder.yml` as parsed (beam size, normalize, ...).
    """

    directory: str
    model_file: str
    config: dict
    weights: dict
    source_vocab: dict
    target_vocab: dict
    separate_vocabs: bool
    source_spm: str | None
    target_spm: str | None
    marian_config: dict
    decoder_options: dict


def read_marian_release(directory, max_position_embeddings=512):
    """Reads a Marian release folder as a Hugging Face Marian model.

    Args:
        directory: holds `decoder.yml` and the files it names.
        max_position_embeddings: the config's length limit. Marian's
            sinusoids have none; 512 is what the Helsinki-NLP conversions on
            the Hub declare.

    Returns:
        A `MarianRelease`.

    Raises:
        ValueError: a missing or unreadable file, an ensemble, options with
            no Hugging Face Marian equivalent, missing, unexpected or
            misshapen arrays, pickled arrays, or vocabularies that do not fit
            the model. The message names the file.
    """
    directory = os.fspath(directory)
    decoder_yml = os.path.join(directory, "decoder.yml")
    if not os.path.isfile(decoder_yml):
        raise ValueError(f"{directory}: no decoder.yml; not a Marian release folder.")
    options = _read_yaml(decoder_yml)
    if not isinstance(options, dict):
        raise ValueError(f"{decoder_yml}: expected a YAML mapping of decoding options.")
    models = _string_list(options.get("models"), decoder_yml, "models")
    if len(models) != 1:
        raise ValueError(f"{decoder_yml}: lists {len(models)} models; only a single model "
                         "(not an ensemble) can be converted.")
    relative = _as_bool(options.get("relative-paths", False), decoder_yml, "relative-paths")
    model_file = _locate(directory, models[0], relative, decoder_yml, "model")
    vocab_paths = _string_list(options.get("vocabs"), decoder_yml, "vocabs")
    if len(vocab_paths) != 2:
        raise ValueError(f"{decoder_yml}: lists {len(vocab_paths)} vocabularies; expected two "
                         "(source and target).")
    vocab_files = [_locate(directory, path, relative, decoder_yml, "vocabulary")
                   for path in vocab_paths]

    arrays = _read_npz(model_file)
    marian_config = _model_config(arrays, model_file)
    settings = _check_options(marian_config, model_file)

    vocabs = [read_marian_vocab(path) for path in vocab_files]
    for side, path, vocab, size in zip(("source", "target"), vocab_files, vocabs,
                                       settings["dim_vocabs"]):
        if len(vocab) != size:
            raise ValueError(f"{path}: {len(vocab)} pieces, but the model's {side} vocabulary "
                             f"(dim-vocabs in {os.path.basename(model_file)}) has {size}.")
        for piece in (EOS, UNK):
            if piece not in vocab:
                raise ValueError(f"{path}: no {piece} piece.")
        if PAD in vocab:
            raise ValueError(f"{path}: already has a {PAD} piece; Marian vocabularies have "
                             "none and the conversion appends it.")
    if settings["dim_vocabs"][0] != settings["dim_vocabs"][1]:
        raise ValueError(f"{model_file}: source and target vocabularies differ in size "
                         f"({settings['dim_vocabs'][0]} and {settings['dim_vocabs'][1]}); "
                         "Hugging Face's Marian layout has one padding id for both.")
    if vocabs[0][EOS] != vocabs[1][EOS]:
        raise ValueError(f"{vocab_files[1]}: {EOS} is id {vocabs[1][EOS]}, but "
                         f"{vocab_files[0]} has it at {vocabs[0][EOS]}.")

    weights = _convert_weights(arrays, settings, model_file)
    pad_id = settings["dim_vocabs"][0]
    source_vocab = {**vocabs[0], PAD: pad_id}
    target_vocab = {**vocabs[1], PAD: pad_id}
    config = {
        "model_type": "marian",
        "architectures": ["MarianMTModel"],
        "d_model": settings["d_model"],
        "encoder_layers": settings["encoder_layers"],
        "decoder_layers": settings["decoder_layers"],
        "encoder_attention_heads": settings["heads"],
        "decoder_attention_heads": settings["heads"],
        "encoder_ffn_dim": settings["encoder_ffn_dim"],
        "decoder_ffn_dim": settings["decoder_ffn_dim"],
        "activation_function": settings["activation"],
        "vocab_size": pad_id + 1,
        "decoder_vocab_size": pad_id + 1,
        "pad_token_id": pad_id,
        "eos_token_id": vocabs[0][EOS],
        "forced_eos_token_id": vocabs[0][EOS],
        "decoder_start_token_id": pad_id,
        "scale_embedding": True,
        "share_encoder_decoder_embeddings": settings["shared_embeddings"],
        "tie_word_embeddings": True,
        "max_position_embeddings": max_position_embeddings,
    }
    return MarianRelease(
        directory=directory,
        model_file=model_file,
        config=config,
        weights=weights,
        source_vocab=source_vocab,
        target_vocab=target_vocab,
        separate_vocabs=source_vocab != target_vocab,
        source_spm=_optional_file(directory, "source.spm"),
        target_spm=_optional_file(directory, "target.spm"),
        marian_config=marian_config,
        decoder_options=options,
    )


def write_hf_tokenizer_files(release, directory):
    """Writes a release's tokenizer as Hugging Face's Marian tokenizer reads it.

    `source.spm` and `target.spm` are copied; `vocab.json` is the source
    vocabulary with `<pad>` appended. Separate vocabularies also get
    `target_vocab.json` and a `tokenizer_config.json` saying
    `"separate_vocabs": true`, as Hugging Face's conversion writes them.

    Returns:
        The paths written.

    Raises:
        ValueError: the release folder lacks `source.spm` or `target.spm`.
    """
    directory = os.fspath(directory)
    for name, path in (("source.spm", release.source_spm), ("target.spm", release.target_spm)):
        if path is None:
            raise ValueError(f"{release.directory}: no {name}; it is needed for the tokenizer.")
    os.makedirs(directory, exist_ok=True)
    written = []
    for name, path in (("source.spm", release.source_spm), ("target.spm", release.target_spm)):
        destination = os.path.join(directory, name)
        if os.path.abspath(path) != os.path.abspath(destination):
            shutil.copyfile(path, destination)
        written.append(destination)
    files = [("vocab.json", release.source_vocab)]
    if release.separate_vocabs:
        files += [("target_vocab.json", release.target_vocab),
                  ("tokenizer_config.json", {"separate_vocabs": True})]
    for name, content in files:
        destination = os.path.join(directory, name)
        with open(destination, "w", encoding="utf-8") as file:
            json.dump(content, file, ensure_ascii=False, indent=0)
        written.append(destination)
    return written


# --- vocabularies ---------------------------------------------------------

_DOUBLE_QUOTED = re.compile(r'"((?:[^"\\]|\\.)*)"\s*:\s*(-?\d+)\s*$')
_SINGLE_QUOTED = re.compile(r"'((?:[^']|'')*)'\s*:\s*(-?\d+)\s*$")
_PLAIN = re.compile(r"(\S.*?)\s*:\s+(-?\d+)\s*$")
_ESCAPES = {"0": "\0", "a": "\a", "b": "\b", "t": "\t", "\t": "\t", "n": "\n", "v": "\v",
            "f": "\f", "r": "\r", "e": "\x1b", " ": " ", '"': '"', "/": "/", "\\": "\\",
            "N": "\x85", "_": "\xa0", "L": "\u2028", "P": "\u2029"}
_ESCAPE = re.compile(r"\\(x[0-9A-Fa-f]{2}|u[0-9A-Fa-f]{4}|U[0-9A-Fa-f]{8}|.)")


def _unescape(text):
    """A YAML double-quoted scalar's escapes, resolved."""
    def replace(match):
        code = match.group(1)
        if len(code) > 1:
            return chr(int(code[1:], 16))
        if code not in _ESCAPES:
            raise ValueError(f"unknown escape \\{code}")
        return _ESCAPES[code]
    return _ESCAPE.sub(replace, text)


def read_marian_vocab(path):
    """A Marian `*.vocab.yml` as {piece: id}, ids checked to be 0 ... n-1.

    Parsed line by line (one `piece: id` per line, pieces plain, single- or
    double-quoted as YAML emitters write them) rather than by a YAML loader:
    loading 32,000-entry mappings is slow, and PyYAML's resolvers are easy
    to trip with pieces such as `<<`, `~` or `? `.
    """
    path = os.fspath(path)
    if path.endswith((".spm", ".model", ".fsv")):
        raise ValueError(f"{path}: only Marian YAML vocabularies (*.yml) are supported "
                         "(SentencePiece or factored vocabularies as Marian vocabs are not).")
    vocab = {}
    try:
        with open(path, encoding="utf-8") as file:
            lines = file.read().lstrip("\ufeff").splitlines()
    except (OSError, UnicodeDecodeError) as error:
        raise ValueError(f"{path}: cannot read the vocabulary: {error}.") from None
    for number, line in enumerate(lines, 1):
        stripped = line.strip()
        if not stripped or stripped.startswith("#") or stripped in ("---", "..."):
            continue
        try:
            if stripped.startswith('"'):
                match = _DOUBLE_QUOTED.match(stripped)
                piece = _unescape(match.group(1)) if match else None
            elif stripped.startswith("'"):
                match = _SINGLE_QUOTED.match(stripped)
                piece = match.group(1).replace("''", "'") if match else None
            else:
                match = _PLAIN.match(stripped)
                piece = match.group(1) if match else None
        except ValueError as error:
            raise ValueError(f"{path}, line {number}: {error} in {stripped!r}.") from None
        if match is None:
            raise ValueError(f"{path}, line {number}: expected 'piece: id', got {stripped!r}.")
        if piece in vocab:
            raise ValueError(f"{path}, line {number}: piece {piece!r} appears twice.")
        vocab[piece] = int(match.group(2))
    if sorted(vocab.values()) != list(range(len(vocab))):
        raise ValueError(f"{path}: the ids are not 0 ... {len(vocab) - 1}, each once.")
    return dict(sorted(vocab.items(), key=lambda item: item[1]))


# --- model file -----------------------------------------------------------

def _read_npz(path):
    """All arrays of a Marian `.npz`, refusing pickled (object) arrays."""
    if not zipfile.is_zipfile(path):
        raise ValueError(f"{path}: not an .npz (zip) file.")
    arrays, refused = {}, None
    try:
        with np.load(path, allow_pickle=False) as npz:
            for name in npz.files:
                try:
                    arrays[name] = npz[name]
                except ValueError as error:  # object arrays would need unpickling
                    refused = f"array {name!r} cannot be read without unpickling ({error})"
                    break
    except (OSError, ValueError, zipfile.BadZipFile, EOFError) as error:
        raise ValueError(f"{path}: cannot read the .npz: {error}.") from None
    if refused:
        raise ValueError(f"{path}: {refused}; refusing it.")
    if not arrays:
        raise ValueError(f"{path}: no arrays.")
    return arrays


def _model_config(arrays, path):
    """`special:model.yml`, the options Marian stores with the weights."""
    if CONFIG_KEY not in arrays:
        raise ValueError(f"{path}: no {CONFIG_KEY!r} array; not a Marian model file.")
    raw = arrays[CONFIG_KEY]
    if raw.dtype.kind not in "iuS" or raw.dtype.itemsize != 1:
        raise ValueError(f"{path}: {CONFIG_KEY!r} is {raw.dtype}, not Marian's bytes.")
    text = raw.tobytes().split(b"\0", 1)[0]
    try:
        config = yaml.load(text.decode("utf-8"), Loader=getattr(yaml, "CBaseLoader",
                                                                  yaml.BaseLoader))
    except (UnicodeDecodeError, yaml.YAMLError) as error:
        raise ValueError(f"{path}: {CONFIG_KEY!r} is not YAML: {error}.") from None
    if not isinstance(config, dict):
        raise ValueError(f"{path}: {CONFIG_KEY!r} is not a YAML mapping.")
    return config


def _check_options(config, path):
    """The options our layout can express, or a ValueError naming the first
    one it cannot. Returns the settings the conversion needs."""
    def get(key, default, kind):
        value = config.get(key, default)
        if kind is bool:
            return _as_bool(value, path, key)
        if kind is int:
            try:
                return int(value)
            except (TypeError, ValueError):
                raise ValueError(f"{path}: option {key} is {value!r}, not an integer.") from None
        if kind is list:
            return [] if value in (None, "", []) else value if isinstance(value, list) else [value]
        return "" if value is None else str(value)

    def unsupported(key, value, why):
        raise ValueError(f"{path}: option {key}: {value!r} is not supported ({why}).")

    for key in ("type", "dim-emb", "dim-vocabs", "enc-depth", "dec-depth"):
        if key not in config:
            raise ValueError(f"{path}: {CONFIG_KEY!r} has no {key!r} option.")
    if get("type", "", str) != "transformer":
        unsupported("type", config["type"], "only 'transformer' models")
    # Dropout ('d') does nothing at inference; the rest must be post-norm.
    ops = {key: get(key, default, str).replace("d", "")
           for key, default in (("transformer-preprocess", ""),
                                ("transformer-postprocess", "dan"),
                                ("transformer-postprocess-emb", "d"),
                                ("transformer-postprocess-top", ""))}
    if ops["transformer-preprocess"]:
        unsupported("transformer-preprocess", config["transformer-preprocess"],
                    "pre-norm; only post-norm transformers ('' and 'dan')")
    if ops["transformer-postprocess"] != "an":
        unsupported("transformer-postprocess", config.get("transformer-postprocess"),
                    "only 'dan': add the residual, then layer-normalize")
    for key in ("transformer-postprocess-emb", "transformer-postprocess-top"):
        if ops[key]:
            unsupported(key, config[key], "no embedding or final layer norm in the layout")
    for key, default in (("transformer-decoder-autoreg", "self-attention"),
                         ("transformer-attention-mask", "default")):
        if get(key, default, str) != default:
            unsupported(key, config[key], f"only {default!r}")
    for key in ("right-left", "transformer-train-position-embeddings",
                "transformer-disable-position-embeddings", "transformer-no-projection",
                "transformer-pool", "transformer-no-bias", "transformer-no-affine", "ulr"):
        if get(key, False, bool):
            unsupported(key, config[key], "not in the layout")
    for key in ("ulr-dim-emb", "lemma-dim-emb", "factors-dim-emb"):
        if get(key, 0, int):
            unsupported(key, config[key], "factored or ULR embeddings")
    for key, default in (("transformer-ffn-depth", 2), ("transformer-decoder-ffn-depth", 0)):
        if get(key, default, int) not in (default, 2):
            unsupported(key, config[key], "feed-forward blocks have exactly two layers")
    tied_all = get("tied-embeddings-all", False, bool)
    tied_src = get("tied-embeddings-src", False, bool)
    if not (tied_all or get("tied-embeddings", False, bool)):
        unsupported("tied-embeddings", config.get("tied-embeddings", False),
                    "an output layer untied from the target embeddings")

    dim_vocabs = [int(size) for size in get("dim-vocabs", [], list)]
    if len(dim_vocabs) != 2:
        unsupported("dim-vocabs", config["dim-vocabs"], "exactly one source and one target")
    d_model = get("dim-emb", 0, int)
    heads = get("transformer-heads", 8, int)
    if heads < 1 or d_model % heads:
        unsupported("transformer-heads", heads, f"must divide dim-emb {d_model}")
    decoder_layers = get("dec-depth", 1, int)
    tied_layers = [int(layer) for layer in get("transformer-tied-layers", [], list)]
    if tied_layers and (len(tied_layers) != decoder_layers
                        or not all(1 <= layer <= decoder_layers for layer in tied_layers)):
        unsupported("transformer-tied-layers", tied_layers,
                    f"needs one layer number in 1 ... {decoder_layers} per decoder layer")
    encoder_ffn = get("transformer-dim-ffn", 2048, int)
    return {
        "d_model": d_model,
        "heads": heads,
        "encoder_layers": get("enc-depth", 1, int),
        "decoder_layers": decoder_layers,
        "decoder_layer_sources": tied_layers or list(range(1, decoder_layers + 1)),
        "encoder_ffn_dim": encoder_ffn,
        "decoder_ffn_dim": get("transformer-decoder-dim-ffn", 0, int) or encoder_ffn,
        "activation": _activation(config, path),
        "dim_vocabs": dim_vocabs,
        "shared_embeddings": tied_all or tied_src,
        "omit_output_bias": get("output-omit-bias", False, bool),
    }


def _activation(config, path):
    """Marian's feed-forward activation as Hugging Face names it.

    Marian's "gelu" was x * sigmoid(1.702 x) (HF's "quick_gelu") up to
    version 1.12.2 and the exact erf form (HF's "gelu") from 1.12.3 on, so
    for gelu the model's recorded `version` decides.
    """
    name = str(config.get("transformer-ffn-activation", "swish"))
    if name in ("relu", "swish"):
        return name
    if name == "gelu":
        match = re.match(r"v?(\d+)\.(\d+)\.(\d+)", str(config.get("version", "")))
        if not match:
            raise ValueError(f"{path}: transformer-ffn-activation 'gelu' with no readable Marian "
                             "version; cannot tell the sigmoid approximation (<= 1.12.2) from "
                             "the exact form.")
        return "gelu" if tuple(map(int, match.groups())) >= (1, 12, 3) else "quick_gelu"
    raise ValueError(f"{path}: option transformer-ffn-activation: {name!r} is not supported "
                     "(relu, swish or gelu).")


def _convert_weights(arrays, settings, path):
    """Marian arrays -> HF arrays, every array used and shape-checked."""
    d = settings["d_model"]
    source_size, target_size = settings["dim_vocabs"]
    weights, used = {}, {CONFIG_KEY}

    def take(name, shape):
        if name not in arrays:
            raise ValueError(f"{path}: missing array {name!r}.")
        array = arrays[name]
        if array.shape != shape:
            raise ValueError(f"{path}: array {name!r} has shape {array.shape}, expected {shape}.")
        if array.dtype.kind != "f":
            raise ValueError(f"{path}: array {name!r} is {array.dtype}, not floating point.")
        used.add(name)
        return array.astype(np.float32, copy=False)

    layers = [("encoder", layer + 1, layer, settings["encoder_ffn_dim"])
              for layer in range(settings["encoder_layers"])]
    # Tied decoder layers (transformer-tied-layers) share one Marian layer's
    # arrays; the HF layout stores a copy per layer.
    layers += [("decoder", source, layer, settings["decoder_ffn_dim"])
               for layer, source in enumerate(settings["decoder_layer_sources"])]
    for side, marian_layer, hf_layer, ffn_dim in layers:
        names = _layer_names(side, marian_layer, hf_layer, d, ffn_dim)
        for name, (hf_name, transpose, shape) in names.items():
            array = take(name, shape)
            weights[hf_name] = np.ascontiguousarray(array.T if transpose else array.reshape(-1))

    def with_pad_row(table):  # HF appends <pad> as the last id, a zero row
        return np.concatenate([table, np.zeros((1, d), np.float32)])

    if settings["shared_embeddings"]:
        weights["model.shared.weight"] = with_pad_row(take("Wemb", (source_size, d)))
    else:
        weights["model.encoder.embed_tokens.weight"] = with_pad_row(
            take("encoder_Wemb", (source_size, d)))
        weights["model.decoder.embed_tokens.weight"] = with_pad_row(
            take("decoder_Wemb", (target_size, d)))
    if settings["omit_output_bias"]:
        bias = np.zeros((1, target_size), np.float32)
    else:
        bias = take("decoder_ff_logit_out_b", (1, target_size))
    weights["final_logits_bias"] = np.concatenate([bias, np.zeros((1, 1), np.float32)], axis=1)

    extra = sorted(name for name in arrays if name not in used and not name.startswith("special:"))
    if extra:
        shown = ", ".join(extra[:5]) + (f" and {len(extra) - 5} more" if len(extra) > 5 else "")
        raise ValueError(f"{path}: arrays the Hugging Face Marian layout has no place for: "
                         f"{shown}.")
    return weights


# --- small helpers --------------------------------------------------------

def _read_yaml(path):
    try:
        with open(path, encoding="utf-8") as file:
            return yaml.safe_load(file)
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as error:
        raise ValueError(f"{path}: cannot read it as YAML: {error}.") from None


def _string_list(value, path, key):
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
        raise ValueError(f"{path}: {key!r} must be a list of file names, got {value!r}.")
    return value


def _as_bool(value, path, key):
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in ("true", "yes", "on", "1"):
        return True
    if text in ("false", "no", "off", "0", "", "null", "~"):
        return False
    raise ValueError(f"{path}: option {key} is {value!r}, not a boolean.")


def _locate(directory, name, relative, decoder_yml, what):
    """A file `decoder.yml` names: relative to the folder, as given, or (for
    paths recorded on the training machine) its base name in the folder."""
    candidates = []
    if not os.path.isabs(name):
        candidates.append(os.path.join(directory, name))
    if not relative:
        candidates.append(name)
    candidates.append(os.path.join(directory, os.path.basename(name)))
    for candidate in candidates:
        if os.path.isfile(candidate):
            return candidate
    raise ValueError(f"{decoder_yml}: the {what} file {name!r} is not in {directory}.")


def _optional_file(directory, name):
    path = os.path.join(directory, name)
    return path if os.path.isfile(path) else None
