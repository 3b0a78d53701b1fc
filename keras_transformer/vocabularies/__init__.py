"""Text <-> ids in plain Python, without TensorFlow: what the runtimes of
exported models (ONNX, CTranslate2, LiteRT) and the server tokenize with,
and what the TensorFlow tokenizers of imported models are built on.

- `sentencepiece_text.SentencePieceText`: this package's SentencePiece
  model (`tokenizer.model`).
- `marian.MarianVocabulary`: an OPUS-MT model's `source.spm`, `target.spm`
  and `vocab.json`, as Hugging Face's `MarianTokenizer` reads them.
- `fsmt.FsmtVocabulary`: fairseq's WMT19 models' Moses tokenization and BPE.
- `sentencepiece_proto`: the fields of a SentencePiece model file the
  package reads or rewrites.

Each offers `from_directory(folder)`, `encode(text)` and `encode_target(text)`
(source or target ids, without the end id), `decode(ids)` (target ids up to
the first end id -> text) and `pieces(ids, target=False)`;
`run_folder.load_text_tokenizer` picks the one a folder holds, and
`offsets.piece_offsets` finds each piece in the text it came from.
"""
