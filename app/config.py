"""Operator settings, read from ATLAS_* environment variables."""

from __future__ import annotations

import ipaddress
from functools import lru_cache

from pydantic import Field, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from app.models.placement import DeviceName, DtypeName

TOKEN_LIMIT_CEILING = 32_768
"""The largest token limit a server may be given (ATLAS_MAX_TOKENS)."""


class Settings(BaseSettings):
    """Everything an operator can change. Unsafe values are refused at start-up."""

    model_config = SettingsConfigDict(env_prefix="ATLAS_", env_file=None, extra="ignore")

    log_level: str = Field("info", pattern="^(critical|error|warning|info|debug)$")
    max_tokens: int = Field(
        8192,
        ge=2,
        le=TOKEN_LIMIT_CEILING,
        description="Token limit for any request (also capped by each model's positions, and at "
        "512 for routes that read every map of a text).",
    )
    max_loaded_models: int = Field(2, ge=1, le=16, description="Least recently used is unloaded.")
    forward_cache_entries: int = Field(32, ge=0, le=10_000)
    forward_cache_bytes: int = Field(
        2**30,
        ge=0,
        description="Bound on cached forward passes (one 8,192-token SmolLM2 pass is 585 MB).",
    )
    allowed_models: list[str] | None = Field(
        None, description="Model ids the server may load; None allows the built-in registry."
    )
    extra_models: list[str] = Field(
        default_factory=list, description="Extra Hub ids (or local folders) the operator adds."
    )
    cache_dir: str = Field(
        "var/cache", description="Where converted checkpoints (SmolLM2) are kept between runs."
    )
    preload: list[str] = Field(
        default_factory=lambda: ["sentence-transformers/all-MiniLM-L6-v2"],
        description="Models loaded in the background at start-up.",
    )
    device: DeviceName = Field(
        "auto", description="Where models run: auto picks cuda, then mps, then the CPU."
    )
    dtype: DtypeName = Field(
        "float32",
        description="Weights and activations of every model; maps are bit-exact only to a model "
        "run in this dtype (half precision bounds: docs/faithful-numbers.md).",
    )
    hub_downloads: bool = Field(
        False, description="Let Hub models download on first use (needs internet)."
    )
    lessons_dir: str | None = Field(
        None,
        description="A folder of lessons (*.json, docs/lessons.md) served at /learn beside the "
        "shipped ones.",
    )
    cors_origins: list[str] = Field(default_factory=list, description="Empty: CORS off.")
    max_body_bytes: int = Field(
        2_000_000,
        ge=1024,
        le=100_000_000,
        description="Two texts of 32,767 characters fit (escaped).",
    )
    body_timeout_seconds: float = Field(
        20.0,
        gt=0,
        le=600,
        description="A request head must arrive within this, and its body keep arriving (408).",
    )
    send_timeout_seconds: float = Field(
        30.0, gt=0, le=3600, description="A reader that takes nothing for this long is dropped."
    )
    max_answer_bytes: int = Field(
        128 * 2**20, ge=2**20, le=2**34, description="Largest binary /api/attention answer."
    )
    inflight_bytes: int = Field(
        768 * 2**20,
        ge=2**20,
        description="Forward-pass bytes that answers being sent may hold at once; more wait.",
    )
    inflight_wait_seconds: float = Field(
        10.0, ge=0, le=600, description="How long an answer waits for the in-flight budget (503)."
    )
    rate_limit_per_minute: int = Field(600, ge=0, description="Per client; 0 turns it off.")
    trusted_proxies: list[str] = Field(
        default_factory=list,
        description="Addresses or networks (CIDR) of reverse proxies whose X-Forwarded-For is "
        "believed; empty (the default) believes no one.",
    )

    @field_validator("trusted_proxies")
    @classmethod
    def _proxies_are_addresses(cls, values: list[str]) -> list[str]:
        for value in values:
            try:
                ipaddress.ip_network(value, strict=False)
            except ValueError:
                raise ValueError(
                    f"trusted_proxies holds {value!r}, which is not an IP address or network; "
                    "list your reverse proxies' addresses (trusting everyone would let any "
                    "client choose its own address)"
                ) from None
        return values


@lru_cache
def get_settings() -> Settings:
    return Settings()
