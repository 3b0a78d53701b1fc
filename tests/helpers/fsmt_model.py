"""A small Hugging Face FSMT model folder, as `save_pretrained` writes the
fairseq WMT19 models, for the import tests.

Like the WMT19 configs it says `tie_word_embeddings: false` and stores the
encoder embedding, the decoder embedding and the output projection apart,
with the last two equal (fairseq's shared decoder input and output
embeddings). It is trained with PyTorch for a few seconds on the tokenizer
fixture's English-German lines, the two matrices tied as one parameter
meanwhile, so that its translations end, its distributions are peaked
enough that argmax ties are rare, and its layer norms are no longer their
initial values.
"""

import dataclasses
import os

import torch
from transformers import FSMTConfig, FSMTForConditionalGeneration, FSMTTokenizer

from helpers.fsmt_files import SOURCE_CORPUS, TARGET_CORPUS, write_fsmt_tokenizer_files
from helpers.hf_models import one_torch_thread


@dataclasses.dataclass(frozen=True)
class FsmtModelFiles:
    """What `write_fsmt_model` wrote; the special ids are fairseq's."""

    directory: str
    langs: tuple
    src_vocab_size: int
    tgt_vocab_size: int
    pad_id: int = 1
    eos_id: int = 2

    def hf_tokenizer(self):
        """`FSMTTokenizer` on the folder (source text -> ids + end id)."""
        return FSMTTokenizer.from_pretrained(self.directory)

    def hf_target_tokenizer(self):
        """`FSMTTokenizer` with the sides swapped: it encodes target text."""
        return FSMTTokenizer(
            langs=list(reversed(self.langs)),
            src_vocab_file=os.path.join(self.directory, "vocab-tgt.json"),
            tgt_vocab_file=os.path.join(self.directory, "vocab-src.json"),
            merges_file=os.path.join(self.directory, "merges.txt"),
        )


def sentence_pairs():
    """The tokenizer fixture's parallel lines, (English, German)."""
    return list(zip(SOURCE_CORPUS.splitlines(), TARGET_CORPUS.splitlines()))


def write_fsmt_model(directory, seed=0, train_steps=150, **config_overrides):
    """Writes tokenizer files and an `FSMTForConditionalGeneration` (2+2
    layers, d_model 32, trained `train_steps` steps) into `directory`;
    returns `(FsmtModelFiles, model)` with the model in eval mode.
    `config_overrides` go to `FSMTConfig` (e.g. `tie_word_embeddings=True`
    with equal vocabulary sizes)."""
    files = write_fsmt_tokenizer_files(directory)
    files = FsmtModelFiles(os.fspath(directory), files.langs, files.src_vocab_size,
                           files.tgt_vocab_size)
    torch.manual_seed(seed)
    settings = dict(
        langs=list(files.langs),
        src_vocab_size=files.src_vocab_size,
        tgt_vocab_size=files.tgt_vocab_size,
        d_model=32,
        encoder_layers=2,
        decoder_layers=2,
        encoder_attention_heads=4,
        decoder_attention_heads=4,
        encoder_ffn_dim=64,
        decoder_ffn_dim=64,
        max_position_embeddings=256,
        tie_word_embeddings=False,
        init_std=0.1,
    )
    model = FSMTForConditionalGeneration(FSMTConfig(**(settings | config_overrides)))
    decoder = model.model.decoder
    tied = model.config.tie_word_embeddings  # then Hugging Face ties all three itself
    if not tied:
        decoder.output_projection.weight = decoder.embed_tokens.weight  # tied while training
    _train(model, files, train_steps)
    model.eval()
    if not tied:
        # Stored apart, as in the WMT19 files (save_pretrained drops a shared
        # parameter that the config does not declare tied).
        decoder.output_projection.weight = torch.nn.Parameter(
            decoder.embed_tokens.weight.detach().clone())
    model.save_pretrained(directory, safe_serialization=True)
    return files, model


def decoder_inputs(labels, files):
    """FSMT's decoder input: the start (end) id, then the labels shifted
    right; padding stays padding."""
    inputs = torch.full_like(labels, files.pad_id)
    inputs[:, 0] = files.eos_id
    inputs[:, 1:] = labels[:, :-1]
    return inputs


def _train(model, files, steps, batch_size=16):
    """A few Adam steps on the parallel lines (teacher forcing). FSMT's
    forward builds no decoder inputs from labels, so they are made here.
    The lines are tokenized once (Moses is slow), batches drawn from them."""
    pairs = sentence_pairs()
    source = files.hf_tokenizer()([s for s, _ in pairs], padding=True, return_tensors="pt")
    labels = files.hf_target_tokenizer()([t for _, t in pairs], padding=True,
                                         return_tensors="pt")["input_ids"]
    inputs = decoder_inputs(labels, files)
    # The positional tables are fixed sinusoids (fairseq's), but Hugging
    # Face leaves them trainable parameters: keep them out of training.
    for side in (model.model.encoder, model.model.decoder):
        side.embed_positions.weight.requires_grad_(False)
    optimizer = torch.optim.Adam([p for p in model.parameters() if p.requires_grad], lr=3e-3)
    generator = torch.Generator().manual_seed(0)
    model.train()
    with one_torch_thread():
        _steps(model, optimizer, generator, source, labels, inputs, steps, batch_size, files.pad_id)


def _steps(model, optimizer, generator, source, labels, inputs, steps, batch_size, pad_id):
    for _ in range(steps):
        rows = torch.randint(len(labels), (batch_size,), generator=generator)
        logits = model(input_ids=source["input_ids"][rows],
                       attention_mask=source["attention_mask"][rows],
                       decoder_input_ids=inputs[rows], use_cache=False).logits
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]),
                                                 labels[rows].reshape(-1), ignore_index=pad_id)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
