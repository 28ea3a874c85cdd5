"""Tiny random checkpoints of the decoder families the capture path replays, made in a test and
saved as a folder the app loads (with GPT-2's tokenizer): shared by the tests of the residual
stream and of the lab's pages."""

from __future__ import annotations

from pathlib import Path

import torch
import transformers as tf
from torch import nn

from tests.conftest import gpt2_tokenizer

SIZE = {"vocab_size": 50257, "hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 4,
        "intermediate_size": 64, "max_position_embeddings": 64}  # fmt: skip
WINDOWED = {"sliding_window": 3, "layer_types": ["sliding_attention", "full_attention"]}
DECODERS = {
    "gpt2": lambda: tf.GPT2Config(vocab_size=50257, n_embd=32, n_layer=2, n_head=4),
    "gpt-neox": lambda: tf.GPTNeoXConfig(**SIZE),  # parallel attention and MLP
    "llama": lambda: tf.LlamaConfig(**SIZE, num_key_value_heads=2),
    "qwen3": lambda: tf.Qwen3Config(**SIZE, num_key_value_heads=2, head_dim=8),
    "phi3": lambda: tf.Phi3Config(**SIZE, num_key_value_heads=2, pad_token_id=0),
    "olmo2": lambda: tf.Olmo2Config(**SIZE, num_key_value_heads=2),  # norms after sublayers
    "gemma2": lambda: tf.Gemma2Config(
        **SIZE,
        num_key_value_heads=2,
        head_dim=8,
        attn_logit_softcapping=5.0,
        final_logit_softcapping=30.0,
        query_pre_attn_scalar=8,
        **WINDOWED,
    ),
    "gemma3": lambda: tf.Gemma3TextConfig(
        **SIZE, num_key_value_heads=1, head_dim=8, query_pre_attn_scalar=8, **WINDOWED
    ),
    "gpt-oss": lambda: tf.GptOssConfig(
        **SIZE,
        num_key_value_heads=2,
        head_dim=8,
        num_local_experts=4,
        num_experts_per_tok=2,
        **WINDOWED,
    ),
}


def save_tiny(model: nn.Module, folder: Path) -> None:
    """`model` with every bias drawn at random (so every bias term is exercised), saved with
    GPT-2's tokenizer into `folder`."""
    with torch.no_grad():
        for module in model.modules():
            if getattr(module, "bias", None) is not None:
                module.bias.normal_(0, 0.1)
    model.save_pretrained(folder)
    gpt2_tokenizer().save_pretrained(folder)
