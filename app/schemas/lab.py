"""Schemas of the lab routes: every mask on a sentence, and the scaling demo."""

from __future__ import annotations

from pydantic import BaseModel, Field

from app.schemas.common import FiniteFloat

MAX_LAB_TOKENS = 256


class MasksRequest(BaseModel):
    model_config = {"json_schema_extra": {"examples": [{"n": 12, "window": 2}]}}

    n: int = Field(12, ge=1, le=MAX_LAB_TOKENS, description="Number of tokens.")
    window: int = Field(2, ge=0, le=MAX_LAB_TOKENS, description="Sliding/dilated/BigBird reach.")
    dilation: int = Field(2, ge=1, le=MAX_LAB_TOKENS)
    global_tokens: list[int] = Field(default_factory=lambda: [0], max_length=MAX_LAB_TOKENS)
    num_random: int = Field(2, ge=0, le=MAX_LAB_TOKENS)
    seed: int = Field(0, ge=0, le=2**31 - 1)
    block_size: int = Field(4, ge=1, le=MAX_LAB_TOKENS)


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


class ScalingRequest(BaseModel):
    model_config = {"json_schema_extra": {"examples": [{"d_k": 64, "temperature": 1.0}]}}

    d_k: int = Field(64, ge=1, le=4096, description="Dimension of queries and keys.")
    temperature: FiniteFloat = Field(1.0, ge=0.05, le=100)
    n_keys: int = Field(12, ge=2, le=64, description="How many keys one query compares with.")
    seed: int = Field(0, ge=0, le=2**31 - 1)


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
