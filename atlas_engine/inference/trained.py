"""A model trained in the lab (attention_core.training) saved as a transformers checkpoint.

The checkpoint is a GPT-2 (`GPT2LMHeadModel`) whose every MLP weight and bias is zero: GPT-2's
block is x + attn(ln_1(x)), then x + mlp(ln_2(x)), and with c_fc and c_proj zero the MLP adds
exactly 0.0 (gelu_new(0) = 0), so each block is the lab's attention-only block. LayerNorm eps is
1e-5 in both; the position embedding is the lab's (zeros when positions were off); the
unembedding is untied (GPT-2's lm_head has no bias, nor has the lab's). Dropout is zero.

The tokenizer is word-level: token i is named `token_names(vocab)[i]` (ba, be, bi, ...), split on
whitespace, so a user types "ba ke mo ba ke mo" in the explorer. One extra id, `[UNK]` = vocab,
holds any other word: its embedding and its unembedding row are zero (its logit is always 0).
"""

from __future__ import annotations

from pathlib import Path

import torch
from tokenizers import Tokenizer, models, pre_tokenizers
from transformers import GPT2Config, GPT2LMHeadModel, PreTrainedTokenizerFast

from attention_core.training import LAYER_NORM_EPS, MAX_VOCAB, AttentionOnly

UNK = "[UNK]"
_CONSONANTS = "bdfghklmnprstvwz"  # 16
_VOWELS = "aeiou"
_NAMES = [c + v for c in _CONSONANTS for v in _VOWELS]  # 80 syllables
_NAMES += [c + v + "x" for c in "bdkmt" for v in _VOWELS][: MAX_VOCAB - len(_NAMES)]


def token_names(vocab: int) -> list[str]:
    """The word for each of the `vocab` token ids: short syllables a user can type."""
    if not 1 <= vocab <= len(_NAMES):
        raise ValueError(f"vocab must be in [1, {len(_NAMES)}]; got {vocab}")
    return _NAMES[:vocab]


def tokenizer_for(vocab: int) -> PreTrainedTokenizerFast:
    """A WordLevel tokenizer over token_names(vocab), whitespace-split, [UNK] = id vocab."""
    words = {name: i for i, name in enumerate(token_names(vocab))}
    words[UNK] = vocab
    core = Tokenizer(models.WordLevel(vocab=words, unk_token=UNK))
    core.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    return PreTrainedTokenizerFast(tokenizer_object=core, unk_token=UNK)


def gpt2_config(model: AttentionOnly) -> GPT2Config:
    """GPT-2's config for `model`: no dropout, eager attention, untied unembedding."""
    c = model.config
    return GPT2Config(
        vocab_size=c.vocab + 1,  # + [UNK]
        n_positions=c.seq_len,
        n_embd=c.d_model,
        n_layer=c.layers,
        n_head=c.heads,
        n_inner=4,  # the MLP's width; its weights are zero
        activation_function="gelu_new",
        resid_pdrop=0.0,
        embd_pdrop=0.0,
        attn_pdrop=0.0,
        layer_norm_epsilon=LAYER_NORM_EPS,
        tie_word_embeddings=False,
        bos_token_id=None,
        eos_token_id=None,
        attn_implementation="eager",  # maps from output_attentions (loaders choose their own)
    )


@torch.no_grad()
def to_gpt2(model: AttentionOnly) -> GPT2LMHeadModel:
    """A GPT2LMHeadModel computing what `model` computes (eval mode, float32)."""
    c = model.config
    gpt = GPT2LMHeadModel(gpt2_config(model)).eval()
    t = gpt.transformer
    t.wte.weight.zero_()
    t.wte.weight[: c.vocab] = model.embed
    t.wpe.weight.copy_(model.pos)
    for block, ours in zip(t.h, model.blocks, strict=True):
        block.ln_1.weight.copy_(ours.ln.weight)
        block.ln_1.bias.copy_(ours.ln.bias)
        # Conv1D: y = x W + b, W (in, out); ours are nn.Linear's (out, in)
        block.attn.c_attn.weight.copy_(torch.cat([ours.w_q, ours.w_k, ours.w_v]).T)  # (d, 3d)
        block.attn.c_attn.bias.copy_(torch.cat([ours.b_q, ours.b_k, ours.b_v]))
        block.attn.c_proj.weight.copy_(ours.w_o.T)
        block.attn.c_proj.bias.copy_(ours.b_o)
        for p in block.mlp.parameters():
            p.zero_()
        block.ln_2.weight.fill_(1.0)  # feeds the zero MLP only
        block.ln_2.bias.zero_()
    t.ln_f.weight.copy_(model.ln_f.weight)
    t.ln_f.bias.copy_(model.ln_f.bias)
    gpt.lm_head.weight.zero_()
    gpt.lm_head.weight[: c.vocab] = model.unembed
    return gpt


def save_checkpoint(model: AttentionOnly, folder: Path) -> Path:
    """Write `model` to `folder` as a GPT-2 checkpoint (config.json, model.safetensors,
    tokenizer.json) that transformers and the explorer open. Returns the folder."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    to_gpt2(model).save_pretrained(folder, safe_serialization=True)
    tokenizer_for(model.config.vocab).save_pretrained(folder)
    return folder
