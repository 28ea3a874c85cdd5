"""The one table of tiny random architectures the tests make: every family the capture path
replays (encoders, decoders, and T5 as an encoder-decoder), each a config of two or three small
layers. The capture path's tests build them with a small vocabulary of their own; the tests of
the residual stream and of the lab's pages save them as folders the app loads, with GPT-2's
tokenizer (`save_tiny`). A new architecture is one more row here, and each of those tests
takes it."""

from __future__ import annotations

from pathlib import Path

import torch
import transformers as tf
from torch import nn

from tests.conftest import gpt2_tokenizer

VOCAB = 50257  # GPT-2's tokenizer, the one save_tiny saves; a config's vocab_size defaults to it
SIZE = {"vocab_size": VOCAB, "hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 4,
        "intermediate_size": 64, "max_position_embeddings": 64}  # fmt: skip
WINDOWED = {"sliding_window": 3, "layer_types": ["sliding_attention", "full_attention"]}


def sized(vocab: int) -> dict:
    """SIZE with a vocabulary of `vocab` tokens."""
    return {**SIZE, "vocab_size": vocab}


ENCODERS = {
    "bert": lambda v=VOCAB: tf.BertConfig(**sized(v)),
    "roberta": lambda v=VOCAB: tf.RobertaConfig(**sized(v), pad_token_id=1),
    "distilbert": lambda v=VOCAB: tf.DistilBertConfig(
        vocab_size=v, dim=32, n_layers=2, n_heads=4, hidden_dim=64, max_position_embeddings=64
    ),
    "modernbert": lambda v=VOCAB: tf.ModernBertConfig(
        **{**sized(v), "num_hidden_layers": 3},
        global_attn_every_n_layers=2,
        local_attention=4,
        pad_token_id=0,
    ),
}
DECODERS = {
    "gpt2": lambda v=VOCAB: tf.GPT2Config(
        vocab_size=v, n_embd=32, n_layer=2, n_head=4, n_positions=64
    ),
    "gpt-neox": lambda v=VOCAB: tf.GPTNeoXConfig(**sized(v)),  # parallel attention and MLP
    "llama": lambda v=VOCAB: tf.LlamaConfig(**sized(v), num_key_value_heads=2),
    "mistral": lambda v=VOCAB: tf.MistralConfig(
        **sized(v), num_key_value_heads=2, sliding_window=3
    ),
    "qwen2": lambda v=VOCAB: tf.Qwen2Config(**sized(v), num_key_value_heads=2),  # q, k, v biases
    "qwen3": lambda v=VOCAB: tf.Qwen3Config(**sized(v), num_key_value_heads=2, head_dim=8),
    "phi3": lambda v=VOCAB: tf.Phi3Config(**sized(v), num_key_value_heads=2, pad_token_id=0),
    "olmo2": lambda v=VOCAB: tf.Olmo2Config(**sized(v), num_key_value_heads=2),  # norms after
    "gemma2": lambda v=VOCAB: tf.Gemma2Config(
        **sized(v),
        num_key_value_heads=2,
        head_dim=8,
        attn_logit_softcapping=5.0,
        final_logit_softcapping=30.0,
        query_pre_attn_scalar=8,
        **WINDOWED,
    ),
    "gemma3": lambda v=VOCAB: tf.Gemma3TextConfig(
        **sized(v), num_key_value_heads=1, head_dim=8, query_pre_attn_scalar=8, **WINDOWED
    ),  # MQA
    "gpt-oss": lambda v=VOCAB: tf.GptOssConfig(
        **sized(v),
        num_key_value_heads=2,
        head_dim=8,
        num_local_experts=4,
        num_experts_per_tok=2,
        **WINDOWED,
    ),
}
ENCODER_DECODERS = {
    "t5": lambda v=VOCAB: tf.T5Config(
        vocab_size=v,
        d_model=32,
        d_kv=8,
        d_ff=64,
        num_layers=2,
        num_heads=4,
        decoder_start_token_id=0,
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


def load_tiny(name: str, folder: Path):
    """The tiny model `name` of any table above (seed 0, biases drawn), saved into `folder` and
    loaded as the app loads a local model: a LoadedModel (T5 as its encoder-decoder)."""
    torch.manual_seed(0)
    config = {**DECODERS, **ENCODERS, **ENCODER_DECODERS}[name]()
    if name in ENCODER_DECODERS:
        made = tf.T5ForConditionalGeneration(config)
    else:
        made = (tf.AutoModelForCausalLM if name in DECODERS else tf.AutoModel).from_config(config)
    save_tiny(made, folder)
    return load_folder(folder, name)


def load_folder(folder: Path, name: str):
    """A checkpoint folder loaded as the app loads `local/<name>=<folder>`."""
    from atlas_engine.models.loader import load_model
    from atlas_engine.models.registry import parse_extra_model
    from tests.conftest import CACHE_DIR

    spec = parse_extra_model(f"local/{name}={folder}")
    return load_model(spec, cache_dir=CACHE_DIR, token_limit=64, progress=lambda *a, **k: None)
