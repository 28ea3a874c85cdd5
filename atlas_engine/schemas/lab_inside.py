"""Schemas of the course's first two lab pages on a real model: what one layer's heads compute
(what a head is), and one forward pass from tokens to the next token. Texts are at most
MAX_LAB_REAL_TOKENS tokens, counted before any forward pass."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, field_validator

from atlas_engine.schemas.attention import EXAMPLE_TEXT, check_text
from atlas_engine.schemas.common import NOT_BLANK, Index, StrictModel
from atlas_engine.schemas.lab_models import (
    MAX_LAB_REAL_TOKENS,
    MINILM,
    SMOLLM2,
    Grid,
    RealHeadRequest,
)

MAX_LAB_WIDTH = 1024
"""The widest layer (d_model, and heads × head width) whose matrices a lab page sends whole:
64 tokens × 1,024 numbers a matrix at most (BERT-base and GPT-2 are 768 wide)."""
SHOWN_DIMS = 64
"""Embedding dimensions the forward-pass page sends of each token (its norm uses them all)."""
NEXT_TOKEN_TOP = 10
FORWARD_EXAMPLE = "The Eiffel Tower is in the city of"


class HeadAnatomyRequest(RealHeadRequest):
    """One layer of a model, and the head shown in detail."""

    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {"model": MINILM, "text": EXAMPLE_TEXT, "layer": 0, "head": 2},
                {"model": SMOLLM2, "text": EXAMPLE_TEXT, "layer": 3, "head": 4},
            ]
        }
    )

    head: Index = Field(2, description="The query head shown in detail (0-based).")


class HeadAnatomyResponse(BaseModel):
    """Every matrix is (rows, columns) as written: tokens down, features across."""

    model: str
    tokens: list[str]
    layer: int
    head: int
    causal: bool = Field(description="decoders mask the future before the softmax")
    rope: bool = Field(description="q and k are rotated by position (RoPE) before q·kᵀ")
    d_model: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    scale: float = Field(description="the factor q·kᵀ is multiplied by: 1/√head_dim")
    kv_head_of: list[int] = Field(description="the K/V head each query head reads")
    qkv_bias: bool = Field(description="the q, k, v projections add a bias")
    output_bias: bool = Field(description="W_O adds a bias b_O")
    x: Grid = Field(description="(seq, d_model): the layer's input, what W_Q, W_K, W_V read")
    q: Grid = Field(description="(seq, head_dim): the chosen head's queries (after RoPE)")
    k: Grid = Field(description="(seq, head_dim): the keys of its K/V head (after RoPE)")
    v: Grid = Field(description="(seq, head_dim): the values of its K/V head")
    head_output: Grid = Field(description="(seq, head_dim): the chosen head's A_h V_h")
    weights: list[Grid] = Field(description="(heads, seq, seq): every head's weights")
    joined: Grid = Field(description="(seq, heads × head_dim): the heads' outputs side by side")
    output: Grid = Field(description="(seq, d_model): joined · W_Oᵀ + b_O, the attention output")
    weights_max_abs_diff: list[float] = Field(
        description="per head: max |Δ| of the weights against the model's own on a real pass"
    )
    head_output_max_abs_diff: list[float] = Field(
        description="per head: max |Δ| of its output against the model's own columns of the "
        "joined outputs entering W_O"
    )
    output_max_abs_diff: float = Field(
        description="max |Δ| of `output` against the model's own attention output"
    )


class ForwardPassRequest(StrictModel):
    model_config = ConfigDict(
        json_schema_extra={"examples": [{"model": SMOLLM2, "text": FORWARD_EXAMPLE}]}
    )

    model: str = Field(
        SMOLLM2,
        min_length=1,
        max_length=300,
        description="A model's id; one with an LM head (SmolLM2) goes on to the next token.",
    )
    text: str = Field(
        description=f"One sentence (at most {MAX_LAB_REAL_TOKENS} tokens).",
        max_length=2000,
        examples=[FORWARD_EXAMPLE],
        json_schema_extra={"minLength": 1, "pattern": NOT_BLANK},
    )

    @field_validator("text")
    @classmethod
    def _text_ok(cls, v: str) -> str:
        return check_text(v, "text")


class Guess(BaseModel):
    token_id: int
    token: str
    probability: float
    logit: float | None = Field(None, description="the LM head's logit, where sent")


class ForwardPassResponse(BaseModel):
    model: str
    tokens: list[str]
    token_ids: list[int]
    num_layers: int
    d_model: int
    causal: bool
    rotary: bool = Field(description="q and k are rotated by position (RoPE) inside attention")
    renormalised: bool = Field(
        description="each block normalises the stream after adding to it (post-norm, BERT); "
        "false where blocks only add to it (pre-norm) and the norms inside read a copy"
    )
    shown_dims: int = Field(description="embedding dimensions sent of each token")
    embeddings: Grid = Field(
        description="(seq, shown_dims): each token's row of the embedding matrix, cut to the "
        "first shown_dims dimensions"
    )
    embedding_norms: list[float] = Field(description="(seq,): each row's length, all dims")
    entering_norms: list[float] = Field(
        description="(seq,): what enters block 0: the embedding rows, scaled (Gemma), or with "
        "positions added and normalised (BERT, GPT-2)"
    )
    residual_norms: Grid = Field(description="(layers, seq): the stream leaving each block")
    attention_norms: Grid = Field(description="(layers, seq): what each block's attention adds")
    mlp_norms: Grid = Field(description="(layers, seq): what each block's MLP adds")
    final_norms: list[float] | None = Field(
        description="(seq,): after the final norm, what the LM head reads; null without one"
    )
    vocab_size: int | None = Field(description="the LM head's outputs; null without a head")
    no_head: str | None = Field(
        description="why the pass stops at the last hidden state (a model without an LM head)"
    )
    next_token: list[Guess] | None = Field(
        description=f"the {NEXT_TOKEN_TOP} likeliest next tokens after the last position: "
        "softmax of the model's logits in float64"
    )
    top_guess: list[Guess] | None = Field(
        description="(seq,): the likeliest next token at every position"
    )
