"""Schemas of POST /api/attention/token: one token through every layer and head."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from atlas_engine.schemas.attention import EXAMPLE_TEXT, TextRequest
from atlas_engine.schemas.common import Index

Grid3 = list[list[list[float]]]
Grid2 = list[list[float]]


class FollowRequest(TextRequest):
    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {
                    "model": "sentence-transformers/all-MiniLM-L6-v2",
                    "text": EXAMPLE_TEXT,
                    "token": 9,
                }
            ]
        }
    )

    token: Index = Field(description="The token to follow (0-based; below the text's length).")


class FollowResponse(BaseModel):
    """Weights rounded to 6 decimals. Rows of as_query sum to 1; columns of as_key need not."""

    model: str
    tokens: list[str]
    token: int
    num_layers: int
    num_heads: int
    as_query: Grid3 = Field(description="[layer][head][key]: what the token attends to")
    as_key: Grid3 = Field(description="[layer][head][query]: what each token gives the token")
    query_mean: Grid2 = Field(description="[layer][key]: as_query averaged over the heads")
    query_max: Grid2 = Field(description="[layer][key]: the largest over the heads")
    key_mean: Grid2 = Field(description="[layer][query]: as_key averaged over the heads")
    key_max: Grid2 = Field(description="[layer][query]: the largest over the heads")
