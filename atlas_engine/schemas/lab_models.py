"""Schemas of the lab routes that replay a real model's heads: GQA pooling, cross-attention,
sparse weights, RoPE on and off, and a padded batch. Texts are at most MAX_LAB_REAL_TOKENS
tokens, counted before the forward pass."""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, field_validator

from atlas_engine.schemas.attention import EXAMPLE_TEXT, TextRequest, check_text
from atlas_engine.schemas.common import NOT_BLANK, Index, Seed, StrictModel, index_list, json_int

MAX_LAB_REAL_TOKENS = 64
Grid = list[list[float]]
MINILM = "sentence-transformers/all-MiniLM-L6-v2"
SMOLLM2 = "HuggingFaceTB/SmolLM2-135M-Instruct"


class RealHeadRequest(StrictModel):
    """A text of at most 64 tokens and one layer of a model."""

    model: str = TextRequest.model_fields["model"]
    text: str = Field(
        description=f"One sentence (at most {MAX_LAB_REAL_TOKENS} tokens).",
        max_length=2000,
        examples=[EXAMPLE_TEXT],
        json_schema_extra={"minLength": 1, "pattern": NOT_BLANK},
    )
    layer: Index = Field(0, description="Layer (0-based, below the model's count).")

    @field_validator("text")
    @classmethod
    def _text_ok(cls, v: str) -> str:
        return check_text(v, "text")


class KvSharingRequest(RealHeadRequest):
    model_config = ConfigDict(
        json_schema_extra={"examples": [{"model": MINILM, "text": EXAMPLE_TEXT, "kv_heads": 4}]}
    )

    kv_heads: json_int(ge=1, le=512) = Field(
        1, description="K/V heads after pooling; must divide the model's own count (1 = MQA)."
    )


class KvSharingResponse(BaseModel):
    model: str
    tokens: list[str]
    layer: int
    num_heads: int
    model_kv_heads: int
    kv_heads: int
    options: list[int] = Field(description="K/V head counts this model can be pooled to")
    group_of: list[int] = Field(description="K/V head each query head reads, as trained")
    pooled_group_of: list[int] = Field(description="the same after pooling")
    weights: list[Grid] = Field(description="(heads, seq, seq), the model's own K/V heads")
    pooled_weights: list[Grid] = Field(description="(heads, seq, seq), pooled K/V heads")
    moved: list[float] = Field(description="mean total variation between the two, per head")
    replay_max_abs_diff: float = Field(description="own-K/V replay against transformers")


class CrossRequest(StrictModel):
    model_config = ConfigDict(
        json_schema_extra={
            "examples": [{"model": MINILM, "text_a": "Where is the cat?", "text_b": EXAMPLE_TEXT}]
        }
    )

    model: str = Field(MINILM, min_length=1, max_length=300, description="An encoder's id.")
    text_a: str = Field(
        description="Queries come from this sentence.",
        max_length=2000,
        json_schema_extra={"minLength": 1, "pattern": NOT_BLANK},
    )
    text_b: str = Field(
        description="Keys and values come from this one.",
        max_length=2000,
        json_schema_extra={"minLength": 1, "pattern": NOT_BLANK},
    )
    layer: Index = 0

    @field_validator("text_a", "text_b")
    @classmethod
    def _text_ok(cls, v: str, info) -> str:
        return check_text(v, info.field_name)


class CrossResponse(BaseModel):
    model: str
    layer: int
    tokens_a: list[str]
    tokens_b: list[str]
    weights: list[Grid] = Field(description="(heads, len_a, len_b): A's queries over B's keys")
    output_norms: list[list[float]] = Field(description="(heads, len_a): |weights @ V|")


SparseGlobal = index_list(MAX_LAB_REAL_TOKENS, "Global token positions, each below the length")


class SparseRequest(RealHeadRequest):
    model_config = ConfigDict(
        json_schema_extra={"examples": [{"model": MINILM, "text": EXAMPLE_TEXT, "layer": 1}]}
    )

    head: Index = 3
    window: json_int(ge=0, le=MAX_LAB_REAL_TOKENS) = 2
    dilation: json_int(ge=1, le=MAX_LAB_REAL_TOKENS) = 2
    global_tokens: SparseGlobal = Field(default_factory=lambda: [0])
    num_random: json_int(ge=0, le=MAX_LAB_REAL_TOKENS) = 2
    seed: Seed = 0
    block_size: json_int(ge=1, le=MAX_LAB_REAL_TOKENS) = 4


class SparsePattern(BaseModel):
    kind: str
    label: str
    mask: list[list[bool]] = Field(description="(seq, seq), true = scored")
    weights: Grid = Field(description="softmax over the allowed keys only, (seq, seq)")
    pairs: int
    full_pairs: int = Field(description="pairs full attention scores (causal: the lower half)")
    dropped_mass: float = Field(description="mean over rows of the full weight outside the mask")
    dropped_per_row: list[float]
    output_change: float = Field(description="mean |out_sparse - out_full| / mean |out_full|")


class SparseResponse(BaseModel):
    model: str
    tokens: list[str]
    layer: int
    head: int
    causal: bool
    full_weights: Grid
    patterns: list[SparsePattern]


class RopeHeadRequest(RealHeadRequest):
    model_config = ConfigDict(
        json_schema_extra={
            "examples": [{"model": SMOLLM2, "text": EXAMPLE_TEXT, "layer": 16, "head": 0}]
        }
    )

    head: Index = 0


class RopeHeadResponse(BaseModel):
    model: str
    tokens: list[str]
    layer: int
    head: int
    with_rope: Grid
    without_rope: Grid
    replay_max_abs_diff: float = Field(description="with RoPE, against transformers' own map")
    previous_token_share: list[float] = Field(description="[with, without]: mean w[i, i-1]")
    first_token_share: list[float] = Field(description="[with, without]: mean w[i, 0]")


Sentence = Annotated[
    str,
    Field(min_length=1, max_length=300, json_schema_extra={"pattern": NOT_BLANK}),
]


class PaddingRequest(StrictModel):
    model_config = ConfigDict(
        json_schema_extra={
            "examples": [{"sentences": ["A short one.", "This sentence is quite a bit longer."]}]
        }
    )

    model: str = Field(MINILM, min_length=1, max_length=300, description="An encoder's id.")
    sentences: list[Sentence] = Field(min_length=2, max_length=4)
    layer: Index = 0
    head: Index = 0

    @field_validator("sentences")
    @classmethod
    def _texts_ok(cls, values: list[str]) -> list[str]:
        return [check_text(v, f"sentences[{i}]") for i, v in enumerate(values)]


class PaddedSentence(BaseModel):
    tokens: list[str] = Field(description="padded to the batch's length")
    length: int = Field(description="real tokens; the rest is padding")
    weights: Grid = Field(description="(seq, seq) from the padded batch")
    max_weight_on_padding: float = Field(description="largest weight any query gives a pad key")
    alone_max_abs_diff: float = Field(description="real rows and keys against a run alone")


class PaddingResponse(BaseModel):
    model: str
    layer: int
    head: int
    seq_len: int
    attention_mask: list[list[int]] = Field(description="(batch, seq): 1 real, 0 padding")
    sentences: list[PaddedSentence]
