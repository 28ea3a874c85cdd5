"""Schemas of POST /api/attention/forward: run (or find cached) a forward pass, streaming its
progress layer by layer, before windows of its maps are asked for."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field


class ForwardProgress(BaseModel):
    event: Literal["progress"]
    layer: int = Field(description="layers done so far (0 when the first one starts)")
    layers: int = Field(description="layers in all")


class ForwardDone(BaseModel):
    event: Literal["done"]
    model: str
    tokens: list[str] = Field(description="display labels, one per token")
    special_tokens: list[bool]
    seq_len: int
    num_layers: int
    num_heads: int
    num_kv_heads: int = Field(description="key/value heads (fewer than num_heads with GQA)")
    causal: bool
    cached: bool = Field(description="true when the pass was already in the server's cache")
    forward_ms: float = Field(description="how long the pass took when it ran")
    full_map_tokens: int = Field(
        description="the model's limit for routes that read every map; longer texts are read "
        "with /api/attention/tiles"
    )


class ForwardFailed(BaseModel):
    event: Literal["error"]
    status: int = Field(description="the HTTP status this would have had (503: busy, 499: gone)")
    detail: str
