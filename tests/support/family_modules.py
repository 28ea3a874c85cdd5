"""Where BERT, GPT-2 and Llama keep each layer's attention module and output projection, named
by hand: an independent reference for the tests (the app names none: the capture path's probe
finds the attention modules, and W_O is found by what enters it)."""

from torch import nn

from atlas_engine.models.registry import Family


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
