"""Searching for translations, and translating text (TensorFlow only).

- `greedy_search`, `beam_search`, `length_penalty`: cached incremental
  decoding in core TF ops, exportable and XLA-compilable; `Sampling`:
  greedy search drawing tokens from the model's distribution instead.
- `Translator`, `translate_text`: strings in, strings out.
- `SlotSearch` (`slots`), `SlotTranslator`: continuous batching, sentences
  joining and leaving a running search between steps.
"""

from keras_transformer.decoding.search import (
    Sampling,
    SearchResult,
    beam_search,
    greedy_search,
    length_penalty,
    output_limits,
)
from keras_transformer.decoding.slots import SlotSearch
from keras_transformer.decoding.translator import SlotTranslator, Translator, translate_text

__all__ = [
    "Sampling",
    "SearchResult",
    "SlotSearch",
    "SlotTranslator",
    "Translator",
    "beam_search",
    "greedy_search",
    "length_penalty",
    "output_limits",
    "translate_text",
]
