"""The checks a request passes before any work: its layer and head indices against the model,
and its answer's size against the limits (services/attention.py's maps and the services that
read layers or heads by index share them). Each refusal says what to ask for instead."""

from __future__ import annotations

from collections.abc import Sequence

from atlas_engine.errors import InvalidInput
from atlas_engine.models.loader import LoadedModel
from atlas_engine.schemas.attention import MAX_JSON_WEIGHTS
from atlas_engine.serialize import BYTES_PER_WEIGHT, answer_bytes_bound


def indices(requested: Sequence[int] | None, count: int, what: str) -> list[int]:
    """The requested indices (distinct and non-empty, by the schema) checked against the model."""
    if requested is None:
        return list(range(count))
    bad = [i for i in requested if not 0 <= i < count]
    if bad:
        raise InvalidInput(
            f"{what} {bad[:5]} out of range: this model has {count} (0 to {count - 1})"
        )
    return list(requested)


def check_layer_head(loaded: LoadedModel, layer: int, head: int) -> None:
    """Refuse a layer or head index the model does not have, naming its range."""
    indices([layer], loaded.arch.num_layers, "layer")
    indices([head], loaded.arch.num_heads, "head")


def check_answer_size(
    fmt: str, layers: int, heads: int, seq: int, max_answer_bytes: int, side: int | None = None
) -> None:
    """Refuse an answer over its limit, from the request alone, saying how to ask for less.
    side: the values a map has along each side where the route pools blocks (`cell`); None
    where it cannot (seq values a side)."""
    larger_cell = "" if side is None else ", a larger cell"
    side = seq if side is None else side
    weights = layers * heads * side * side
    per_layer = heads * side * side
    if fmt == "json":
        if weights <= MAX_JSON_WEIGHTS:
            return
        fit = MAX_JSON_WEIGHTS // per_layer
        raise InvalidInput(
            f"as JSON this answer would hold {weights:,} weights (about "
            f"{answer_bytes_bound(fmt, weights, seq) // 2**20} MB); the JSON limit is "
            f"{MAX_JSON_WEIGHTS:,}. Ask for fewer layers or heads ({_fit_hint(fit)} at this "
            f"length){larger_cell}, or use format 'u8' or 'f16' (binary, 1-2 bytes a weight)."
        )
    size = answer_bytes_bound(fmt, weights, seq)
    if size <= max_answer_bytes:
        return
    fit = (max_answer_bytes - answer_bytes_bound(fmt, 0, seq)) // (
        per_layer * BYTES_PER_WEIGHT[fmt]
    )
    smaller = "" if fmt == "u8" else ", or use format 'u8' (1 byte a weight, error <= 1/510)"
    raise InvalidInput(
        f"this answer would be {size / 2**20:,.1f} MB in format '{fmt}'; one answer may be at "
        f"most {max_answer_bytes / 2**20:,.0f} MB. Ask for fewer layers or heads "
        f"({_fit_hint(fit)} at this length){larger_cell}{smaller}."
    )


MAX_LAYER_MAP_BYTES = 160 * 2**20
"""The float32 maps of one layer (the heads asked for) that a maps answer may compute at once:
SmolLM2's 9 heads up to 2,181 tokens, one head up to 6,544. Beyond that, /api/attention/tiles."""


def check_layer_bytes(heads: int, seq: int) -> None:
    """Refuse a maps answer whose one layer would exceed MAX_LAYER_MAP_BYTES in memory."""
    size = 4 * heads * seq * seq
    if size > MAX_LAYER_MAP_BYTES:
        fit = MAX_LAYER_MAP_BYTES // (4 * seq * seq)
        raise InvalidInput(
            f"one layer of these {heads} heads over {seq:,} tokens is {size / 2**20:,.0f} MB of "
            f"float32 weights; a maps answer computes at most {MAX_LAYER_MAP_BYTES // 2**20} MB "
            f"at once ({fit} head{'s' if fit != 1 else ''} at this length). Ask for fewer heads, "
            "or read the text a window at a time with POST /api/attention/tiles."
        )


def _fit_hint(layers: int) -> str:
    return (
        f"at most {layers} layer{'s' if layers != 1 else ''} of these heads"
        if layers
        else (
            "fewer heads: not even one layer of these heads fits; read a window at a time "
            "with POST /api/attention/tiles"
        )
    )
