"""Facts about a model read from its config (Architecture), with no code per family: the names
are transformers' common ones, through each config's attribute_map.

Nothing here finds a module: every view that replays a head reads the layer's own call through
the capture path (atlas_engine.models.capture), and the residual stream's pieces are read off a
probe pass (atlas_engine.inference.residual, probes, layer_lab).
"""

from __future__ import annotations

from dataclasses import dataclass

from transformers import AutoConfig, PretrainedConfig


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
    rotary: bool = False  # q and k rotated by position (the config has rope_parameters)


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
    rotary = getattr(c, "rope_parameters", None) is not None
    return Architecture(layers, heads, kv_heads, head_dim, positions, width, bias, rotary)


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
