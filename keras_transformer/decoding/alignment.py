"""Word alignment from the model's own attention: which source piece each
piece of a translation came from, for putting a document's inline markup
back around the words it marked (`documents.html`, `documents.docx`).

Each piece of the translation is aligned to the source piece its
encoder-decoder attention weighs most, averaged over the heads of one
layer. A search keeps these positions as it goes (`search`'s
`alignment_layer`; `Translator.translate(..., aligned=True)`), which costs
next to nothing; a translation made elsewhere is read again with its
source, teacher-forced (`attention_alignments`), the same attention in a
second pass of the model. The layer is the next-to-last
decoder layer where there are several, whose attention follows word
alignment more closely than the last's in Transformer translation models
(Garg et al., 2019, "Jointly Learning to Align and Translate with
Transformer Models"). The end token is never an alignment target.
"""

import numpy as np
import tensorflow as tf

from keras_transformer.batch_defaults import length_batches
from keras_transformer.documents.alignment import from_tokens
from keras_transformer.vocabularies.offsets import piece_offsets


def alignment_layer(model):
    """The decoder layer whose attention aligns (see the module docstring)."""
    return max(model.config.num_decoder_layers - 2, 0)


def attention_alignments(model, tokenizer, sources, translations, batch_tokens=4096):
    """An `Alignment` of each translation (str) with its source (str), from
    `model`'s attention with `tokenizer` (the model's, in TensorFlow ops).
    The pairs are read in batches of similar lengths, of at most
    `batch_tokens` target tokens counted with padding (as the search
    batches)."""
    if not sources:
        return []
    config = model.config
    source_rows = tokenizer.tokenize(tf.constant(sources))[:, :config.max_source_tokens].to_list()
    target_rows = tokenizer.tokenize_target(
        tf.constant(translations))[:, :config.max_length - 1].to_list()
    layer = alignment_layer(model)
    chosen = [[] for _ in sources]
    lengths = [max(len(source_row), len(target_row)) + 1
               for source_row, target_row in zip(source_rows, target_rows)]
    for batch in length_batches(lengths, batch_tokens):
        source = _padded([source_rows[i] + [config.eos_id] for i in batch], config.pad_id)
        target = _padded([[config.decoder_start_id] + target_rows[i] for i in batch],
                         config.pad_id)
        weights = np.asarray(model.cross_attention(source, target, layer)).mean(axis=1)
        for row, index in enumerate(batch):
            if source_rows[index]:  # an empty source aligns nothing
                chosen[index] = weights[row, :len(target_rows[index]),
                                        :len(source_rows[index])].argmax(axis=-1).tolist()
    return [token_alignment(tokenizer, sources[index], source_ids, translations[index],
                            target_ids, chosen[index])
            for index, (source_ids, target_ids) in enumerate(zip(source_rows, target_rows))]


def token_alignment(tokenizer, source, source_ids, translation, target_ids, attended):
    """The `Alignment` of `translation` (str, its ids `target_ids`, no end
    token) with `source` (str, its ids `source_ids`): target token i to the
    source token at `attended[i]`, as character spans of the two texts."""
    return from_tokens(list(enumerate(attended[:len(target_ids)])),
                       piece_offsets(source, tokenizer.pieces(source_ids)),
                       piece_offsets(translation, tokenizer.target_pieces(target_ids)))


def _padded(rows, pad_id):
    """Rows of ids as one int32 array, padded with `pad_id` to the longest."""
    out = np.full((len(rows), max(len(row) for row in rows)), pad_id, np.int32)
    for index, row in enumerate(rows):
        out[index, :len(row)] = row
    return out
