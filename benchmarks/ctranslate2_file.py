"""A file translated with CTranslate2 and SentencePiece alone, as their
documentation shows (`translate_file.py` times this script as a process,
from start to written file, beside `examples/translate.py`):

    python benchmarks/ctranslate2_file.py CT2_FOLDER INPUT OUTPUT [BEAM]

CT2_FOLDER is the `ctranslate2/` folder of our export (its `tokenizer.model`
and `decoding.json` give the tokenizer and our search's settings).
"""

import json
import os
import sys

import ctranslate2
import sentencepiece


def translate(translator, tokenizer, lines, beam_size, defaults, **batching):
    """CTranslate2's `translate_batch` over SentencePiece pieces, with the
    export's decoding settings (see the README's CTranslate2 section);
    `batching`: `max_batch_size` and `batch_type`."""
    results = translator.translate_batch(
        [tokenizer.encode(line, out_type=str) for line in lines], beam_size=beam_size,
        min_decoding_length=0, length_penalty=defaults["ctranslate2_length_penalty"],
        suppress_sequences=defaults["suppress_sequences"],
        max_decoding_length=defaults["max_length"] - 1, **batching)
    return [tokenizer.decode(result.hypotheses[0]) for result in results]


def main(folder, source, target, beam_size=4):
    tokenizer = sentencepiece.SentencePieceProcessor(
        model_file=os.path.join(folder, "tokenizer.model"))
    with open(os.path.join(folder, "decoding.json"), encoding="utf-8") as file:
        defaults = json.load(file)
    translator = ctranslate2.Translator(folder, device="cpu", compute_type="float32")
    with open(source, encoding="utf-8") as file:
        lines = file.read().splitlines()
    translations = translate(translator, tokenizer, lines, int(beam_size), defaults,
                             max_batch_size=32)
    with open(target, "w", encoding="utf-8") as file:
        file.write("".join(line + "\n" for line in translations))


if __name__ == "__main__":
    main(*sys.argv[1:])
