"""Schemas of POST /api/attention/ablate: chosen heads switched off, against the same text's
unablated run."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from atlas_engine.models.lm_head import MAX_TOP_K
from atlas_engine.schemas.attention import EXAMPLE_TEXT, TextRequest
from atlas_engine.schemas.common import Index, StrictModel, json_int
from atlas_engine.schemas.predictions import Candidate

MAX_ABLATED_HEADS = 64


class HeadRef(StrictModel):
    layer: Index
    head: Index


class AblationRequest(TextRequest):
    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {
                    "model": "HuggingFaceTB/SmolLM2-135M-Instruct",
                    "text": EXAMPLE_TEXT,
                    "heads": [{"layer": 3, "head": 0}],
                    "mode": "zero",
                    "layer": 5,
                    "head": 0,
                }
            ]
        }
    )

    heads: list[HeadRef] = Field(
        min_length=1,
        max_length=MAX_ABLATED_HEADS,
        description="The heads to switch off, each once.",
        json_schema_extra={"uniqueItems": True},
    )
    mode: Literal["zero", "mean"] = Field(
        "zero",
        description="zero: the head's output is 0; mean: at every position it is its mean over "
        "the text's positions (keeps the head's average contribution, removes what varies)",
    )
    layer: Index = Field(0, description="The layer whose head is shown both ways.")
    head: Index = Field(0, description="The head shown both ways.")
    top_k: json_int(ge=1, le=MAX_TOP_K) = Field(5, description="Candidates per position.")

    @field_validator("heads")
    @classmethod
    def _distinct(cls, heads: list[HeadRef]) -> list[HeadRef]:
        pairs = [(h.layer, h.head) for h in heads]
        if len(set(pairs)) != len(pairs):
            raise ValueError("heads must be distinct (layer, head) pairs")
        return heads


class AblatedPosition(BaseModel):
    position: int
    base: list[Candidate] = Field(description="The unablated run's top-k.")
    ablated: list[Candidate] = Field(description="The ablated run's top-k.")
    kl: float = Field(ge=0, description="KL(unablated || ablated) over the vocabulary, nats")
    logit_change: float = Field(
        description="The unablated top token's logit, ablated minus unablated"
    )


class AblationResponse(BaseModel):
    model: str
    tokens: list[str]
    mode: Literal["zero", "mean"]
    ablated: list[HeadRef]
    predicts: Literal["next_token", "masked", "none"] = Field(
        description="next_token: every position; masked: the mask tokens; none: no LM head, "
        "so `positions` is empty and only attention is compared"
    )
    positions: list[AblatedPosition]
    attention_change: list[list[float]] = Field(
        description="[layer][head]: the mean over query rows of the total variation distance "
        "between the unablated and ablated rows (0 in and before the first ablated layer)"
    )
    layer: int
    head: int
    weights: list[list[float]] = Field(description="(seq, seq): the shown head, unablated")
    ablated_weights: list[list[float]] = Field(description="(seq, seq): the same, ablated")
