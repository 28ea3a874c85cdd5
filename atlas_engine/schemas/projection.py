"""Schemas of POST /api/corpus/{run_id}/heads/{layer}/{head}/projection: one head's queries,
keys, values and outputs over a sample of a corpus run's tokens, in 2-D (HeadVis's projection)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from atlas_engine.schemas.common import Seed, StrictModel, json_int

MAX_PROJECTION_TOKENS = 2048
"""Tokens a projection reads at most: 2 × 2,048 points in the query-key plane, which the page
draws as SVG within its 200 ms a task."""
DEFAULT_PROJECTION_TOKENS = 1024
MIN_PROJECTION_TOKENS = 16


class ProjectionRequest(StrictModel):
    model_config = ConfigDict(
        json_schema_extra={"examples": [{"tokens": 1024, "method": "pca", "seed": 0}]}
    )

    tokens: json_int(ge=MIN_PROJECTION_TOKENS, le=MAX_PROJECTION_TOKENS) = Field(
        DEFAULT_PROJECTION_TOKENS,
        description="The token budget: texts of the run are taken in a seeded order until "
        f"this many tokens are read (the last text's first tokens only); at most "
        f"{MAX_PROJECTION_TOKENS}.",
    )
    method: Literal["pca", "umap"] = Field(
        "pca",
        description="pca: exact, from the SVD of the centred points; umap: needs the optional "
        "umap-learn package (GET /api/models lists `projections`; 422 otherwise).",
    )
    seed: Seed = Field(0, description="The order the run's texts are sampled in.")


class ProjectedText(BaseModel):
    idx: int = Field(description="The text's index in the run")
    text: str
    tokens: int = Field(description="Its tokens read into the projection (a prefix of the text)")
    max_activation: float | None = Field(
        description="HeadVis's max_activation of the whole text for this head (the largest "
        "weight of its map off row 0 and column 0), as the corpus job kept it: the number "
        "HeadVis ranks and samples texts by; null for a text described before the job kept "
        "HeadVis's numbers"
    )


class Plane(BaseModel):
    explained: list[float] | None = Field(
        description="PCA: each axis's share of the (centred) variance; UMAP: null"
    )


class ProjectionResponse(BaseModel):
    run: int
    model: str
    layer: int
    head: int
    kv_head: int = Field(description="The key/value head the query head reads (GQA)")
    method: Literal["pca", "umap"]
    texts: list[ProjectedText]
    token: list[str] = Field(description="(n,): each point's token, as the explorer labels it")
    text: list[int] = Field(description="(n,): the index into `texts` of each point's text")
    position: list[int] = Field(description="(n,): its position in its text")
    special: list[bool]
    received: list[float] = Field(
        description="(n,): the attention the token receives from this head as a key, summed "
        "over the queries of its text"
    )
    entropy: list[float] = Field(
        description="(n,): the entropy (nats) of the token's own row of the head's map"
    )
    activation: list[float | None] = Field(
        description="(n,): HeadVis's activation of the token's own row: its largest weight "
        "off column 0 (null at position 0, which HeadVis leaves out); the largest over a whole "
        "text is the text's max_activation"
    )
    queries: list[list[float]] = Field(description="(n, 2): queries, in the query-key plane")
    keys: list[list[float]] = Field(description="(n, 2): keys, in the same plane")
    values: list[list[float]] = Field(description="(n, 2): values, in their own plane")
    outputs: list[list[float]] = Field(
        description="(n, 2): the head's outputs (its slice of the output projection's input, "
        "Σ_j α_ij v_j, before o_proj), in their own plane"
    )
    query_key: Plane
    value_plane: Plane
    output_plane: Plane
    query_scale: float = Field(
        gt=0, description="Queries were multiplied by this and keys divided by it"
    )
    seconds: float = Field(description="Time the passes and projections took")
