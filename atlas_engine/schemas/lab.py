"""Schemas of the lab routes: every mask on a sentence, and the scaling demo."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from atlas_engine.schemas.common import FiniteFloat, Seed, StrictModel, index_list, json_int

MAX_LAB_TOKENS = 256


Tokens = json_int(ge=1, le=MAX_LAB_TOKENS)
Reach = json_int(ge=0, le=MAX_LAB_TOKENS)
GlobalTokens = index_list(MAX_LAB_TOKENS, "Global token positions, each below n")


class MasksRequest(StrictModel):
    model_config = ConfigDict(json_schema_extra={"examples": [{"n": 12, "window": 2}]})

    n: Tokens = Field(12, description="Number of tokens.")
    window: Reach = Field(2, description="Sliding/dilated/BigBird reach.")
    dilation: json_int(ge=1, le=MAX_LAB_TOKENS) = 2
    global_tokens: GlobalTokens = Field(default_factory=lambda: [0])
    num_random: Reach = 2
    seed: Seed = 0
    block_size: json_int(ge=1, le=MAX_LAB_TOKENS) = 4


class MaskView(BaseModel):
    kind: str
    label: str
    explanation: str
    mask: list[list[bool]] = Field(description="(n, n), true = may attend")
    computed_pairs: int
    full_pairs: int


class MasksResponse(BaseModel):
    n: int
    masks: list[MaskView]


class ScalingRequest(StrictModel):
    model_config = ConfigDict(json_schema_extra={"examples": [{"d_k": 64, "temperature": 1.0}]})

    d_k: json_int(ge=1, le=4096) = Field(64, description="Dimension of queries and keys.")
    temperature: FiniteFloat = Field(1.0, ge=0.05, le=100)
    n_keys: json_int(ge=2, le=64) = Field(12, description="How many keys one query compares with.")
    seed: Seed = 0


class SoftmaxSide(BaseModel):
    """One side of the comparison (scaled or unscaled)."""

    logits: list[float]
    weights: list[float]
    entropy: float = Field(description="nats; log(n_keys) is uniform")
    max_weight: float
    effective_tokens: float = Field(description="exp(entropy)")
    jacobian_norm: float = Field(description="Frobenius norm of d softmax / d logits")


class ScalingResponse(BaseModel):
    d_k: int
    temperature: float
    n_keys: int
    scaled: SoftmaxSide
    unscaled: SoftmaxSide
    variance_unscaled: float = Field(description="empirical var(q·k); theory: d_k")
    variance_scaled: float = Field(description="empirical var(q·k/sqrt(d_k)); theory: 1")
    curve_d_k: list[int]
    curve_entropy_scaled: list[float] = Field(description="mean entropy over random draws")
    curve_entropy_unscaled: list[float]
    max_entropy: float = Field(description="log(n_keys)")
