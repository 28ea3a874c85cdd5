"""Schemas of POST /api/attention and POST /api/attention/detail."""

from __future__ import annotations

import re
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from atlas_engine.schemas.common import (
    NOT_BLANK,
    FiniteFloat,
    Index,
    PositiveScale,
    StrictModel,
    index_list,
    json_int,
)

MAX_TEXT_CHARS = 32 * 1024 - 1
"""Characters a text may have: 32,767, four a token over SmolLM2's context of 8,192 tokens (its
tokenizer reads the docs' prose at 3.6 characters a token, 8,192 tokens in 29,550
characters); the token limit itself is checked after tokenising (422). Not more: schemathesis
builds its strings in a 32 KiB buffer, and the suite must be able to send one character over."""
MAX_INDEX_LIST = 512
MAX_JSON_WEIGHTS = 4_000_000  # about 50 MB of JSON; binary answers are bounded in bytes instead
LayerList = index_list(MAX_INDEX_LIST, "Layer indices")
HeadList = index_list(MAX_INDEX_LIST, "Head indices")

MAX_CELL = 4096
"""The largest cell × cell block a maps or tiles answer may reduce to one value."""
BlockReduce = Literal["max", "mean"]

MapsFormat = Literal["json", "f32", "f16", "u8", "safetensors", "npy"]
"""How maps answers are encoded: see AttentionRequest.format."""

EXAMPLE_TEXT = "The animal didn't cross the street because it was too tired."


def check_text(value: str | None, name: str) -> str | None:
    """Text a tokenizer can take: not blank (NOT_BLANK), valid Unicode (no lone surrogates)."""
    if value is None:
        return None
    if not re.search(NOT_BLANK, value):
        raise ValueError(f"{name} is empty; type a sentence")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as err:
        raise ValueError(
            f"{name} contains an unpaired surrogate (\\u{ord(value[err.start]):04x}) at character "
            f"{err.start}; send valid Unicode text"
        ) from err
    return value


class TextRequest(StrictModel):
    model: str = Field(
        description="A model id from GET /api/models.",
        examples=["sentence-transformers/all-MiniLM-L6-v2"],
        min_length=1,
        max_length=300,
    )
    text: str = Field(
        description=f"The sentence to analyse (at most {MAX_TEXT_CHARS} characters, and at most "
        "the model's max_tokens tokens).",
        max_length=MAX_TEXT_CHARS,
        examples=[EXAMPLE_TEXT],
        json_schema_extra={"minLength": 1, "pattern": NOT_BLANK},
    )
    text_pair: str | None = Field(
        None,
        description="Second sentence (segment B), BERT-family models only.",
        max_length=MAX_TEXT_CHARS,
        json_schema_extra={"minLength": 1, "pattern": NOT_BLANK},
    )

    @field_validator("text")
    @classmethod
    def _text_ok(cls, v: str) -> str:
        return check_text(v, "text")

    @field_validator("text_pair")
    @classmethod
    def _pair_ok(cls, v: str | None) -> str | None:
        return check_text(v, "text_pair")


class AttentionRequest(TextRequest):
    """Which maps to return: all layers and heads by default."""

    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {"model": "sentence-transformers/all-MiniLM-L6-v2", "text": EXAMPLE_TEXT},
                {
                    "model": "HuggingFaceTB/SmolLM2-135M-Instruct",
                    "text": EXAMPLE_TEXT,
                    "layers": [0],
                    "heads": [0, 1],
                    "format": "u8",
                },
            ]
        }
    )

    layers: LayerList | None = None
    heads: HeadList | None = None
    format: MapsFormat = Field(
        "json",
        description=f"json: float32 values, exact (at most {MAX_JSON_WEIGHTS:,} weights). "
        "f32: binary float32, exact. f16: binary float16, |error| <= 2^-12. "
        "u8: binary uint8 (round(w*255)), |error| <= 1/510. Binary layout: see the API docs. "
        "safetensors: one float32 tensor 'attentions', exact, the other fields in its "
        "metadata. npy: numpy's .npy of the same float32 array, weights only.",
    )
    cell: json_int(ge=1, le=MAX_CELL) = Field(
        1,
        description="1 (default): the weights themselves. Above 1, each map comes back as "
        "ceil(tokens / cell) x ceil(tokens / cell) values, each the max or mean (`reduce`) of a "
        "cell x cell block of weights counted from the top left (the last blocks may be short): "
        "a thumbnail of a long text for a fraction of the bytes. The answer limits count these "
        "values.",
    )
    reduce: BlockReduce = Field(
        "max",
        description="How a cell x cell block becomes one value: its largest weight (a sharp "
        "head stays visible) or its mean (ignored when cell is 1).",
    )


class AttentionResponse(BaseModel):
    """attentions[i][j][q][k]: weight query q gives key k in layers[i], heads[j]."""

    model: str
    tokens: list[str] = Field(description="Readable labels: '␣' marks a leading space.")
    raw_tokens: list[str] = Field(description="The tokenizer's own vocabulary pieces.")
    token_ids: list[int]
    special_tokens: list[bool] = Field(description="True for [CLS], [SEP], <|endoftext|> ...")
    segments: list[int] | None = Field(description="0/1 per token for sentence pairs.")
    num_layers: int
    num_heads: int
    num_kv_heads: int
    causal: bool
    predicts: Literal["next_token", "masked", "none"] = Field(
        description="what POST /api/attention/predictions gives for this model (none: its "
        "checkpoint has no LM head)"
    )
    layers: list[int]
    heads: list[int]
    cell: int = Field(description="Each value covers cell x cell weights (1: the weights).")
    reduce: BlockReduce = Field(description="How a block became one value (cell above 1).")
    attentions: list[list[list[list[float]]]]
    cached: bool = Field(description="True when served from an earlier forward pass.")
    forward_ms: float = Field(
        description="Duration of the model's forward pass (for a model without an LM head, up "
        "to its last attention block: nothing after it is shown)."
    )


DETAIL_MATRICES = (
    "q", "k", "v", "scores", "scaled_scores", "mask", "weights", "output",
    "counterfactual_weights", "products", "value_weighted",
)  # fmt: skip
DetailMatrix = Literal[DETAIL_MATRICES]


class DetailRequest(TextRequest):
    """One head in depth, recomputed from the model's own weights (the replay)."""

    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {
                    "model": "sentence-transformers/all-MiniLM-L6-v2",
                    "text": EXAMPLE_TEXT,
                    "layer": 0,
                    "head": 2,
                    "query": 3,
                }
            ]
        }
    )

    layer: Index = Field(0, description="0-based layer index.")
    head: Index = Field(0, description="0-based query-head index.")
    query: Index | None = Field(
        None, description="A query token whose elementwise q∘k products to return."
    )
    scale: bool | PositiveScale = Field(
        True,
        description="Counterfactual scale: true = the model's own 1/sqrt(d), false = unscaled, "
        "or a number in (0, 1e6].",
    )
    temperature: FiniteFloat = Field(
        1.0, ge=1e-6, le=1e6, description="Counterfactual temperature, in [1e-6, 1e6]."
    )
    fields: list[DetailMatrix] | None = Field(
        None,
        min_length=1,
        max_length=len(DETAIL_MATRICES),
        json_schema_extra={"uniqueItems": True},
        description="The matrices to return (the others come back null); all when omitted. "
        "At 512 tokens each (seq, seq) matrix is about 5 MB of JSON: ask for what you draw.",
    )

    @field_validator("fields")
    @classmethod
    def _distinct_fields(cls, v: list[str] | None) -> list[str] | None:
        if v is not None and len(set(v)) != len(v):
            raise ValueError("repeats a field; list each once")
        return v


Matrix = list[list[float]] | None
"""A matrix, or null when the request's `fields` left it out."""


class DetailResponse(BaseModel):
    """Per-head internals. Matrices are (seq, seq) unless said otherwise; a matrix the
    request's `fields` left out is null."""

    model: str
    tokens: list[str]
    special_tokens: list[bool]
    layer: int
    head: int
    kv_head: int = Field(description="The key/value head this query head reads (GQA).")
    head_dim: int
    model_scale: float = Field(description="The factor the model multiplies q·k by.")
    softcap: float | None = Field(
        description="Where the model caps its scores (Gemma 2): the softmax reads "
        "tanh(scaled_scores / softcap) × softcap; null where it does not."
    )
    sink: float | None = Field(
        description="This head's attention-sink logit (gpt-oss): a column the softmax also "
        "reads and then drops, so each row of `weights` sums to less than 1 (never "
        "renormalised); null where the model has none."
    )
    position_bias: bool = Field(
        description="Whether the model adds a position bias to this head's scores before the "
        "softmax (T5's relative positions)."
    )
    q: Matrix = Field(description="(seq, head_dim) queries, after RoPE if any.")
    k: Matrix = Field(description="(seq, head_dim) keys, after RoPE if any.")
    v: Matrix = Field(description="(seq, head_dim) values of the key/value head.")
    scores: Matrix = Field(description="raw q·k")
    scaled_scores: Matrix = Field(description="q·k × model_scale")
    mask: list[list[bool]] | None = Field(description="true = may attend (causal for decoders)")
    weights: Matrix = Field(
        description="softmax: the maps every view shows (the model's own, or their replay where "
        "maps are replayed on demand)"
    )
    output: Matrix = Field(description="(seq, head_dim_v) weights × v: the head's output")
    replay_max_abs_diff: float = Field(
        description="max |this replay − `weights`| for this head: against transformers' own "
        "output_attentions where the server keeps them (half precision, maps-only models); 0 where "
        "maps are replayed on demand, whose bound against transformers is tested (1e-5)"
    )
    counterfactual_scale: float
    counterfactual_temperature: float
    counterfactual_weights: Matrix = Field(
        description="the same head at the requested scale and temperature"
    )
    query: int | None
    products: Matrix = Field(
        description="(seq, head_dim): q[query] ∘ k[j] for each key j; sums give scores[query]; "
        "null without a query"
    )
    value_weighted: Matrix = Field(
        description="(seq, seq): ‖weights[i][j] · v[j]‖, how much of key j's value vector query "
        "i mixes in (Kobayashi et al., 2020, without the output projection)"
    )
