"""Schemas of POST /api/attention/predictions: the model's own top-k beside its attention."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from atlas_engine.models.lm_head import MAX_TOP_K
from atlas_engine.schemas.attention import EXAMPLE_TEXT, TextRequest
from atlas_engine.schemas.common import json_int


class PredictionsRequest(TextRequest):
    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {"model": "HuggingFaceTB/SmolLM2-135M-Instruct", "text": EXAMPLE_TEXT, "top_k": 5}
            ]
        }
    )

    top_k: json_int(ge=1, le=MAX_TOP_K) = Field(5, description="Candidates per position.")


class Candidate(BaseModel):
    token_id: int
    token: str = Field(description="The token as displayed (␣ marks a leading space)")
    probability: float = Field(ge=0, le=1)


class PositionPrediction(BaseModel):
    position: int = Field(
        description="The query row: for next_token, what the model predicts after this token; "
        "for masked, the mask token's own position."
    )
    candidates: list[Candidate] = Field(description="Most likely first.")
    actual_rank: int | None = Field(
        description="next_token: the rank (0 = top) the text's own next token has among the "
        "candidates, null when it is not among them or this is the last position; masked: null."
    )


class PredictionsResponse(BaseModel):
    model: str
    tokens: list[str]
    kind: Literal["next_token", "masked"] = Field(
        description="next_token for causal decoders: every position predicts the token after "
        "it. masked for BERT-family encoders: only the text's mask tokens are predicted."
    )
    mask_token: str | None = Field(description="masked: the token to write in the text")
    top_k: int
    positions: list[PositionPrediction]
