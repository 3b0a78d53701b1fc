"""A small Hugging Face Marian model folder, as `save_pretrained` writes an
OPUS-MT model, for the import tests.

Untrained weights make poor test subjects for searches: with tied
embeddings a random decoder repeats its input token forever, so no sequence
ends. The model is therefore trained with PyTorch for a few seconds on the
tokenizer fixture's German-English pairs: its translations then end, its
distributions are peaked enough that argmax ties are rare, and its layer
norms and logits bias are no longer their initial values (so a mix-up of
gamma and beta, or a dropped bias, cannot pass).
"""

import torch
from transformers import MarianConfig, MarianMTModel

from helpers.hf_models import one_torch_thread
from helpers.marian_files import sentence_pairs, write_marian_tokenizer_files


def write_marian_model(directory, separate_vocabs=False, activation="swish", seed=0,
                       train_steps=150, language_codes=False):
    """Writes tokenizer files and a `MarianMTModel` (2+2 layers, d_model 32,
    trained `train_steps` steps) into `directory`; returns
    `(MarianFiles, MarianMTModel)` with the model in eval mode.
    `language_codes`: the vocabulary has `>>fra<<` and `>>deu<<` (see
    `write_marian_tokenizer_files`)."""
    files = write_marian_tokenizer_files(directory, separate_vocabs=separate_vocabs,
                                         language_codes=language_codes)
    torch.manual_seed(seed)
    config = MarianConfig(
        vocab_size=files.vocab_size,
        decoder_vocab_size=files.target_vocab_size,
        d_model=32,
        encoder_layers=2,
        decoder_layers=2,
        encoder_attention_heads=4,
        decoder_attention_heads=4,
        encoder_ffn_dim=64,
        decoder_ffn_dim=64,
        max_position_embeddings=256,
        activation_function=activation,
        pad_token_id=files.pad_id,
        eos_token_id=files.eos_id,
        decoder_start_token_id=files.pad_id,
        forced_eos_token_id=None,
        scale_embedding=True,
        share_encoder_decoder_embeddings=not separate_vocabs,
        init_std=0.1,
    )
    model = MarianMTModel(config)
    _train(model, files, train_steps)
    model.eval()
    model.save_pretrained(directory, safe_serialization=True)
    return files, model


def _train(model, files, steps, batch_size=32):
    """A few Adam steps on German-English pairs (teacher forcing, HF's loss)."""
    tokenizer = files.hf_tokenizer()
    pairs = sentence_pairs()
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
    generator = torch.Generator().manual_seed(0)
    model.train()
    with one_torch_thread():
        _steps(model, files, tokenizer, pairs, optimizer, generator, steps, batch_size)


def _steps(model, files, tokenizer, pairs, optimizer, generator, steps, batch_size):
    for _ in range(steps):
        rows = torch.randint(len(pairs), (batch_size,), generator=generator).tolist()
        batch = tokenizer([pairs[i][0] for i in rows], text_target=[pairs[i][1] for i in rows],
                          padding=True, return_tensors="pt")
        batch["labels"][batch["labels"] == files.pad_id] = -100
        loss = model(**batch).loss
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
