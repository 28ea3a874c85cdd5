"""A GPT-2 built by hand, whose heads do what they were built to do (a known answer for tests).

Residual stream (width 128), for texts made of the WORDS below:
  dims 0-7    the token: one-hot of its word
  dims 8-39   the position: one-hot (32 positions)
  dims 40-47  written by head 0: one-hot of the previous token's word
Both LayerNorms before attention are identity on these inputs (weight σ, bias μ: every input
holds exactly two ones), the MLP is zero, and the LM head reads dims 40-47 strongly and dims
0-7 weakly:

- head 0 is a previous-token head: its query at position i is β·e(i-1) over the position dims,
  its key at j is e(j), so it puts ~all weight on token i-1 and copies that token's word into
  dims 40-47; the model predicts the previous token;
- head 1 looks uniformly and writes nothing;
so switching head 0 off makes the model predict the current token instead, and switching head 1
off changes nothing.
"""

from __future__ import annotations

import math

import torch

WORDS = [" red", " green", " blue", " cat", " dog", " sun", " moon", " tree"]
WIDTH, POSITIONS, COPY = 128, 32, 40
BETA = 200.0  # query scale: 200 / √64 = 25 after GPT-2's scaling, so weights are ~1 - 1e-10
READ_COPY, READ_TOKEN = 10.0, 4.0  # the LM head's weights on dims 40-47 and on dims 0-7


def copy_previous_gpt2(tokenizer):
    """GPT2LMHeadModel with 1 layer and 2 heads built as the module docstring says."""
    import transformers as tf

    config = tf.GPT2Config(
        vocab_size=len(tokenizer), n_positions=POSITIONS, n_embd=WIDTH, n_layer=1, n_head=2,
        tie_word_embeddings=False, bos_token_id=tokenizer.eos_token_id,
        eos_token_id=tokenizer.eos_token_id,
    )  # fmt: skip
    model = tf.GPT2LMHeadModel(config)
    ids = [tokenizer.convert_tokens_to_ids(tokenizer.tokenize(w))[0] for w in WORDS]
    assert all(len(tokenizer.tokenize(w)) == 1 for w in WORDS), "each word must be one token"
    mean = 2 / WIDTH  # two ones in every input to ln_1
    std = math.sqrt(2 / WIDTH - mean**2)
    head = WIDTH // 2  # each head's width
    with torch.no_grad():
        for p in model.parameters():
            p.zero_()
        for c, token in enumerate(ids):
            model.transformer.wte.weight[token, c] = 1.0
            model.lm_head.weight[token, COPY + c] = READ_COPY
            model.lm_head.weight[token, c] = READ_TOKEN
        for p in range(POSITIONS):
            model.transformer.wpe.weight[p, 8 + p] = 1.0
        block = model.transformer.h[0]
        for norm in (block.ln_1, block.ln_2):
            norm.weight.fill_(std)  # (x - μ) / σ · σ + μ = x
            norm.bias.fill_(mean)
        model.transformer.ln_f.weight.fill_(1.0)
        w = block.attn.c_attn.weight  # Conv1D (in, 3·WIDTH): q | k | v, head 0 first in each
        for p in range(1, POSITIONS):
            w[8 + p, p - 1] = BETA  # head 0's query at position p: β·e(p - 1)
        for p in range(POSITIONS):
            w[8 + p, WIDTH + p] = 1.0  # head 0's key at position p: e(p)
        for c in range(len(WORDS)):
            w[c, 2 * WIDTH + c] = 1.0  # head 0's value: the word's one-hot
            block.attn.c_proj.weight[c, COPY + c] = 1.0  # head 0 writes it to dims 40-47
        assert head >= POSITIONS
    return model


PREVIOUS = 40  # dims 40-47: written by layer 0 head 0 (the previous token's word)


def induction_gpt2(tokenizer):
    """GPT2LMHeadModel with 2 layers of 2 heads, built so that an induction circuit is the only
    thing it computes (the stream as in the module docstring, dims 40-47 written by layer 0):

    - layer 0 head 0 is the previous-token head of copy_previous_gpt2: at position p it writes
      the word at p - 1 into dims 40-47;
    - layer 1 head 0 is an induction head: its query at i is β times the word at i (dims 0-7),
      its key at j is dims 40-47 (the word before j), so position i attends to the position
      after an earlier copy of its word. Its key reads only what layer 0 head 0 wrote.
    The other heads, the MLPs and layer 1's values are zero; both layers' LayerNorms are
    identity on their inputs (two ones in layer 0's, three in layer 1's)."""
    import transformers as tf

    config = tf.GPT2Config(
        vocab_size=len(tokenizer), n_positions=POSITIONS, n_embd=WIDTH, n_layer=2, n_head=2,
        tie_word_embeddings=False, bos_token_id=tokenizer.eos_token_id,
        eos_token_id=tokenizer.eos_token_id,
    )  # fmt: skip
    model = tf.GPT2LMHeadModel(config)
    ids = [tokenizer.convert_tokens_to_ids(tokenizer.tokenize(w))[0] for w in WORDS]
    with torch.no_grad():
        for p in model.parameters():
            p.zero_()
        for c, token in enumerate(ids):
            model.transformer.wte.weight[token, c] = 1.0
            model.lm_head.weight[token, c] = READ_TOKEN
        for p in range(POSITIONS):
            model.transformer.wpe.weight[p, 8 + p] = 1.0
        for layer, ones in ((0, 2), (1, 3)):
            mean = ones / WIDTH
            std = math.sqrt(ones / WIDTH - mean**2)
            block = model.transformer.h[layer]
            for norm in (block.ln_1, block.ln_2):
                norm.weight.fill_(std)
                norm.bias.fill_(mean)
        model.transformer.ln_f.weight.fill_(1.0)
        first = model.transformer.h[0].attn
        w = first.c_attn.weight
        for p in range(1, POSITIONS):
            w[8 + p, p - 1] = BETA
        for p in range(POSITIONS):
            w[8 + p, WIDTH + p] = 1.0
        for c in range(len(WORDS)):
            w[c, 2 * WIDTH + c] = 1.0
            first.c_proj.weight[c, PREVIOUS + c] = 1.0
        w = model.transformer.h[1].attn.c_attn.weight
        for c in range(len(WORDS)):
            w[c, c] = BETA  # the query: the word at i
            w[PREVIOUS + c, WIDTH + c] = 1.0  # the key: the word before j
    return model
