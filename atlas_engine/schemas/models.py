"""Schemas of the model routes."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field


class ModelInfo(BaseModel):
    id: str = Field(examples=["sentence-transformers/all-MiniLM-L6-v2"])
    family: Literal["bert", "gpt2", "llama", "other"] | None = Field(
        description="null when the architecture is not known until the model is downloaded; "
        "'other': any other architecture; every family's heads replay (and the lab's pages "
        "work) through the same capture path where they can: see `replay`"
    )
    causal: bool | None = Field(
        description="null until an 'other' model is loaded and its own maps tell"
    )
    replay: bool | None = Field(
        description="whether heads can be replayed as they ran (Query · Key, Step by step, "
        "Mask, Without √d, Value-weighted, Q-K space, ablation, Deep zoom), through the "
        "function Atlas registers with transformers' attention interface; null when the "
        "model's config is not on this machine yet"
    )
    replay_refusal: str | None = Field(
        None,
        description="why heads cannot be replayed where `replay` is false (linear or latent "
        "attention, attention outside transformers' interface...): its maps are shown as the "
        "model returns them",
    )
    num_layers: int | None
    num_heads: int | None
    num_kv_heads: int | None = Field(description="< num_heads for grouped-query attention")
    head_dim: int | None = Field(None, description="width of one query/key/value head")
    encoder_decoder: bool | None = Field(
        None,
        description="an encoder-decoder (T5): the maps of every view are its encoder's, and "
        "POST /api/attention/decoder gives its decoder's and cross-attention's; null until the "
        "config is known",
    )
    rotary: bool | None = Field(
        None, description="q and k are rotated by position (RoPE); null until the config is known"
    )
    predicts: Literal["next_token", "masked", "none"] | None = Field(
        description="what POST /api/attention/predictions gives: next_token (causal LM head), "
        "masked (masked-LM head), none (the checkpoint has no LM head); null until loaded"
    )
    max_tokens: int | None = Field(
        description="tokens a request may have (model and server limit): the model's whole "
        "context where its maps are replayed on demand (`replay`, float32), else at most 512"
    )
    full_map_tokens: int | None = Field(
        description="tokens a request that reads every map of a text may have (every model "
        "route but /api/attention, which is sized by its answer, and /api/attention/tiles)"
    )
    available: bool
    unavailable_reason: str | None = None
    loaded: bool
    embedded: bool = Field(description="ships with Attention Atlas and works offline")
    description: str


class ModelList(BaseModel):
    models: list[ModelInfo]
    default_encoder: str
    default_decoder: str
    device: Literal["cpu", "cuda", "mps"] = Field(
        description="where this server runs every model (ATLAS_DEVICE, resolved)"
    )
    dtype: Literal["float32", "bfloat16", "float16"] = Field(
        description="the dtype models run in (ATLAS_DTYPE); maps are float32 values either way"
    )
    projections: list[Literal["pca", "umap"]] = Field(
        description="the methods POST /api/attention/qkspace can use here (umap where the "
        "optional umap-learn package is installed)"
    )


class LoadStatus(BaseModel):
    id: str
    state: Literal["idle", "loading", "ready", "failed"]
    stage: str = Field(description="what the loader is doing now")
    fraction: float = Field(ge=0, le=1, description="rough progress, 0 to 1")
    error: str | None = None
    seconds: float | None = Field(None, description="duration of the last completed load")


class InductionText(BaseModel):
    model: str
    length: int = Field(description="random tokens before the repeat")
    seed: int
    text: str = Field(description="the random sequence, a space, and the same sequence again")
