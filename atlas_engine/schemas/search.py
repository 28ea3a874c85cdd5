"""Schemas of POST /api/attention/search: find heads by what they do on a text."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field

from atlas_engine.schemas.attention import EXAMPLE_TEXT, TextRequest
from atlas_engine.schemas.common import FiniteFloat, Index, StrictModel, json_int
from attention_core.head_stats import ROLES, STATISTICS


class PairQuery(StrictModel):
    """Heads where token `source` (a query) gives token `target` (a key) more than `above`."""

    kind: Literal["pair"]
    source: Index = Field(description="The attending token (0-based).")
    target: Index = Field(description="The attended token (0-based).")
    above: FiniteFloat = Field(0.5, ge=0, le=1, description="Weight threshold.")


class RoleQuery(StrictModel):
    """Heads that have this role."""

    kind: Literal["role"]
    role: Literal[tuple(ROLES)]


class RankQuery(StrictModel):
    """Every head ranked by a statistic."""

    kind: Literal["rank"]
    statistic: Literal[STATISTICS]
    order: Literal["descending", "ascending"] = "descending"


Query = Annotated[PairQuery | RoleQuery | RankQuery, Field(discriminator="kind")]


class SearchRequest(TextRequest):
    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {
                    "model": "HuggingFaceTB/SmolLM2-135M-Instruct",
                    "text": EXAMPLE_TEXT,
                    "query": {"kind": "role", "role": "previous-token"},
                }
            ]
        }
    )

    query: Query
    limit: json_int(ge=1, le=1000) = Field(50, description="At most this many heads.")


class FoundHead(BaseModel):
    layer: int
    head: int
    value: float = Field(description="the weight, role score or statistic that matched")


class SearchResponse(BaseModel):
    """Heads matching the query, best first (for 'rank', in the asked order). Heads whose
    statistic is undefined on this text (null in /api/attention/heads) are left out."""

    model: str
    tokens: list[str]
    query: Query
    matches: int = Field(description="how many heads matched before the limit")
    heads: list[FoundHead]
