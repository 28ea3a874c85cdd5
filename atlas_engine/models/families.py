"""Where each architecture keeps its attention weights, so attention_core can replay them.

Each adapter works on the base model transformers' AutoModel returns (BertModel,
DistilBertModel, RobertaModel, GPT2Model, LlamaModel) and reads only the checkpoint's own
weights and config; the arithmetic of the replay lives in attention_core.replay.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor, nn
from transformers import AutoConfig, PretrainedConfig

from atlas_engine.models.registry import Family
from attention_core.replay import QKProjection, Rope


@dataclass(frozen=True)
class Architecture:
    """Facts about one loaded model, read from its config."""

    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    max_positions: int
    d_model: int  # width of the hidden states entering each attention block
    position_bias: bool = False  # a bias added to every head's scores (T5's relative positions)


UNBOUNDED_POSITIONS = 2**31 - 1
"""max_positions of a model with relative positions only (T5): the server's token limit rules."""


def _positions_field(c: PretrainedConfig) -> str | None:
    """The common name of the config field holding the longest sequence (through its
    attribute_map); None for a model with relative positions only (T5)."""
    names = ("max_position_embeddings", "n_positions")
    return next((name for name in names if getattr(c, name, None) is not None), None)


def _count(config: PretrainedConfig, name: str, minimum: int = 1) -> int:
    value = getattr(config, name, None)
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum}; config.json has {value!r}")
    return value


def architecture(c: PretrainedConfig) -> Architecture:
    """Layer and head counts from a model's config object, checked: ValueError names the field
    of config.json that no model could have (0 heads, a width heads do not divide...).

    The names are transformers' common ones; each config's `attribute_map` says where its
    architecture keeps them (GPT-2's n_layer, DistilBERT's dim, T5's d_kv as head_dim ...), so
    no architecture has a branch here."""
    kv = "num_key_value_heads" if getattr(c, "num_key_value_heads", None) else None
    names = tuple(
        c.attribute_map.get(name, name) if name else None
        for name in (
            "num_hidden_layers", "num_attention_heads", kv or "num_attention_heads",
            "hidden_size", _positions_field(c),
        )
    )  # fmt: skip
    layers, heads, kv_heads, width, positions = (
        UNBOUNDED_POSITIONS if name is None else _count(c, name) for name in names
    )
    if heads % kv_heads:
        raise ValueError(f"{names[2]} = {kv_heads} does not divide {names[1]} = {heads}")
    own = getattr(c, "head_dim", None)  # Gemma's 256 is not width / heads; T5's d_kv
    head_dim = own or width // heads
    if not own and width % heads:
        raise ValueError(f"{names[3]} = {width} does not divide into {names[1]} = {heads} heads")
    if c.model_type in ("roberta", "xlm-roberta"):
        positions -= c.pad_token_id + 1  # RoBERTa's positions start after the padding index
    if positions < 2:
        raise ValueError(f"{names[4]} = {positions} leaves no room for a sentence")
    bias = bool(getattr(c, "relative_attention_num_buckets", None))
    return Architecture(layers, heads, kv_heads, head_dim, positions, width, bias)


def architecture_from_dict(config: dict) -> Architecture:
    """The same facts from a config.json read off disk; ValueError says what is wrong."""
    try:
        fields = {k: v for k, v in config.items() if k != "model_type"}
        parsed = AutoConfig.for_model(config["model_type"], **fields)
    except KeyError as err:
        raise ValueError(f"config.json has no {err.args[0]!r}") from None
    except Exception as err:  # transformers validates configs in many ways
        raise ValueError(f"config.json cannot be read: {str(err).splitlines()[0][:200]}") from None
    return architecture(parsed)


def attention_modules(model: nn.Module, family: Family) -> list[nn.Module]:
    """The self-attention module of every layer, in order; its input is the hidden state."""
    if family is Family.GPT2:
        return [block.attn for block in model.h]
    if family is Family.LLAMA:
        return [layer.self_attn for layer in model.layers]
    if model.config.model_type == "distilbert":
        return [layer.attention for layer in model.transformer.layer]
    return [layer.attention.self for layer in model.encoder.layer]


def output_projections(model: nn.Module, family: Family) -> list[nn.Module]:
    """Each layer's output projection, whose input is the heads' outputs side by side:
    (batch, seq, n_heads * head_dim), head h in columns h * head_dim ... (h + 1) * head_dim."""
    modules = attention_modules(model, family)
    if family is Family.GPT2:
        return [m.c_proj for m in modules]
    if family is Family.LLAMA:
        return [m.o_proj for m in modules]
    if model.config.model_type == "distilbert":
        return [m.out_lin for m in modules]
    return [layer.attention.output.dense for layer in model.encoder.layer]


def output_projection_weights(
    model: nn.Module, family: Family, layer: int
) -> tuple[Tensor, Tensor | None]:
    """(W_O (d_model, n_heads * head_dim), b_O (d_model,) or None): one layer's output
    projection in nn.Linear's layout, float32 on the model's device. GPT-2's Conv1D stores its
    weight transposed (in, out), so it is turned back here."""
    module = output_projections(model, family)[layer]
    weight = module.weight.T if family is Family.GPT2 else module.weight
    bias = None if module.bias is None else module.bias.detach().float()
    return weight.detach().float(), bias


def blocks(model: nn.Module, family: Family) -> list[nn.Module]:
    """Every transformer block (layer) in order: its input and output are the residual stream."""
    if family is Family.GPT2:
        return list(model.h)
    if family is Family.LLAMA:
        return list(model.layers)
    if model.config.model_type == "distilbert":
        return list(model.transformer.layer)
    return list(model.encoder.layer)


def mlp_outputs(model: nn.Module, family: Family) -> list[nn.Module]:
    """The module whose output is each block's MLP (feed-forward) contribution: what it adds
    to the residual stream (before a BERT-style block's LayerNorm)."""
    if family is Family.GPT2:
        return [block.mlp for block in model.h]
    if family is Family.LLAMA:
        return [layer.mlp for layer in model.layers]
    if model.config.model_type == "distilbert":
        return [layer.ffn for layer in model.transformer.layer]
    return [layer.output.dense for layer in model.encoder.layer]


def final_norm(model: nn.Module, family: Family) -> nn.Module | None:
    """The norm after the last block that decoders apply before their LM head (None for
    BERT-style encoders, whose blocks end in a LayerNorm of their own)."""
    if family is Family.GPT2:
        return model.ln_f
    if family is Family.LLAMA:
        return model.norm
    return None


def _linear_weights(model: nn.Module, family: Family, module: nn.Module, width: int) -> list:
    """[w_q, b_q, w_k, b_k, w_v, b_v] in nn.Linear layout (biases may be None)."""
    if family is Family.GPT2:
        # Conv1D stores (in, out) and computes x @ W + b; q, k, v are consecutive column blocks.
        weight, bias = module.c_attn.weight, module.c_attn.bias  # (d_model, 3*width), (3*width,)
        out = []
        for i in range(3):
            out += [weight[:, i * width : (i + 1) * width].T, bias[i * width : (i + 1) * width]]
        return out
    if family is Family.LLAMA:
        linears = (module.q_proj, module.k_proj, module.v_proj)
    elif model.config.model_type == "distilbert":
        linears = (module.q_lin, module.k_lin, module.v_lin)
    else:
        linears = (module.query, module.key, module.value)
    return [t for lin in linears for t in (lin.weight, lin.bias)]


def qk_projection(model: nn.Module, family: Family, layer: int) -> QKProjection:
    """One layer's query, key and value weights in nn.Linear layout, with the model's scale:
    float32 on the model's device (a half-precision model's weights upcast, exactly)."""
    arch = architecture(model.config)
    module = attention_modules(model, family)[layer]
    scale = arch.head_dim**-0.5
    if family is Family.GPT2:
        if not model.config.scale_attn_weights:
            scale = 1.0
        if model.config.scale_attn_by_inverse_layer_idx:
            scale /= float(layer + 1)
    tensors = _linear_weights(model, family, module, arch.num_heads * arch.head_dim)
    w_q, b_q, w_k, b_k, w_v, b_v = (None if t is None else t.detach().float() for t in tensors)
    return QKProjection(
        w_q=w_q,
        w_k=w_k,
        b_q=b_q,
        b_k=b_k,
        w_v=w_v,
        b_v=b_v,
        n_heads=arch.num_heads,
        n_kv_heads=arch.num_kv_heads,
        head_dim=arch.head_dim,
        scale=scale,
    )


def rope(model: nn.Module, family: Family, seq_len: int) -> Rope | None:
    """RoPE tables for Llama-family models (from the model's own inverse frequencies)."""
    if family is not Family.LLAMA:
        return None
    rotary = model.rotary_emb
    return Rope.from_inv_freq(
        rotary.inv_freq, seq_len, float(getattr(rotary, "attention_scaling", 1.0))
    )


def hidden_input(args: tuple, kwargs: dict) -> Tensor:
    """The hidden state passed to an attention module's forward, however it was passed."""
    if args and isinstance(args[0], torch.Tensor):
        return args[0]
    for name in ("hidden_states", "query", "x"):
        if isinstance(kwargs.get(name), torch.Tensor):
            return kwargs[name]
    raise RuntimeError(
        f"cannot find the hidden state among the attention module's inputs: {list(kwargs)}"
    )
