"""Schemas of POST /api/attention/composition: how heads compose, from the weights alone (the
Q-, K- and V-composition scores of every earlier head into every later head, against the
score of random heads of the same shapes)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from atlas_engine.schemas.attention import TextRequest
from atlas_engine.schemas.common import StrictModel, json_int
from atlas_engine.schemas.trace import MINILM
from atlas_engine.schemas.writes import SMOL, HeadSource

MAX_COMPOSITION_EDGES = 2000
"""Edges a composition answer may list (each about 130 bytes of JSON)."""

Kind = Literal["q", "k", "v"]


class CompositionRequest(StrictModel):
    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {"model": SMOL, "kind": "all", "top": 200},
                {"model": MINILM, "kind": "k", "top": 20, "focus": {"layer": 3, "head": 1}},
            ]
        }
    )

    model: str = TextRequest.model_fields["model"]
    kind: Literal["q", "k", "v", "all"] = Field(
        "all",
        description="Which composition: q (an earlier head's write read by a later head's "
        "queries), k (by its keys), v (by its values), or all three.",
    )
    top: json_int(ge=1, le=MAX_COMPOSITION_EDGES) = Field(
        200, description="The strongest edges answered, by score less the baseline."
    )
    focus: HeadSource | None = Field(
        None,
        description="One later head whose scores from every earlier head are also answered "
        "in full, for each kind asked.",
    )


class CompositionEdge(BaseModel):
    from_layer: int
    from_head: int
    to_layer: int
    to_head: int = Field(description="The later head (a query head: under GQA its keys and "
                         "values are its group's)")  # fmt: skip
    kind: Kind
    score: float
    baseline: float = Field(description="The kind's random baseline")
    excess: float = Field(description="score - baseline, by which the edges are ranked")


class KindSummary(BaseModel):
    kind: Kind
    baseline: float = Field(description="Mean score of Gaussian random heads of these shapes")
    mean: float = Field(description="Mean score over every earlier -> later pair")
    largest: float
    above: int = Field(description="Pairs scoring above the baseline")
    pairs: int = Field(description="Earlier -> later pairs in all")


class FocusScores(BaseModel):
    layer: int
    head: int
    scores: list[list[list[float]]] = Field(
        description="[kind][earlier layer][earlier head]: every earlier head's score into this "
        "head, the kinds in the order of `kinds` (the earlier layers: 0 to layer - 1)"
    )


class CompositionResponse(BaseModel):
    model: str
    layers: int
    heads: int
    kv_heads: int
    kinds: list[Kind]
    edges: list[CompositionEdge] = Field(
        description="The strongest edges above their baseline, strongest first."
    )
    summary: list[KindSummary]
    focus: FocusScores | None
    seconds: float = Field(
        description="What reading the weights and scoring every pair took when this model's "
        "scores were computed (once per loaded model)"
    )
    convention: str


class CompositionStatus(BaseModel):
    """GET /api/models/{model_id}/composition: how far scoring every pair of a model's heads
    has come (a page polls it while its first composition request runs)."""

    model: str
    state: Literal["not computed", "computing", "ready"] = Field(
        description="ready: the scores are kept and a request only reads them; computing: a "
        "request is computing them now; not computed: the model is not loaded or no request "
        "asked for them yet"
    )
    stage: str = Field(description="What is being done, in words")
    fraction: float = Field(ge=0, le=1, description="The share of the work done, 0 to 1")
