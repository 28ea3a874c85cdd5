"""Operator settings, read from ATLAS_* environment variables."""

from __future__ import annotations

import ipaddress
from functools import lru_cache

from pydantic import Field, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from atlas_engine.models.placement import DeviceName, DtypeName

TOKEN_LIMIT_CEILING = 32_768
"""The largest token limit a server may be given (ATLAS_MAX_TOKENS)."""

SPARE_FILE_DESCRIPTORS = 256
"""File descriptors ATLAS_MAX_CONNECTIONS must leave free (half the open-file limit where that
is less): the server's own files (models, logs, the listening socket) and the connections of
app.transport's health reserve."""


def open_file_limit() -> int | None:
    """The process's open-file limit (ulimit -n); None where there is none or it is unknown."""
    try:
        import resource
    except ImportError:  # not Unix
        return None
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    return None if soft == resource.RLIM_INFINITY else soft


def default_max_connections() -> int:
    """Half the open-file limit, at most 2,000: a connection costs one file descriptor, and one
    over the cap holds its own only while it is refused."""
    limit = open_file_limit()
    return 2000 if limit is None else max(1, min(2000, limit // 2))


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
    model_bytes: int = Field(
        2 * 2**30,
        ge=64 * 2**20,
        description="Memory the loaded models may hold in all, each sized from its files before "
        "it loads (its parameters at the dtype's size, its tokenizer; a GGUF's first conversion "
        "at its peak): the least recently used are unloaded to make room, and a model larger "
        "than this alone is refused (503). The default holds Gemma 3 270M and SmolLM2 at once.",
    )
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
    max_train_seconds: float = Field(
        60.0,
        gt=0,
        le=600,
        description="POST /api/lab/train refuses (422) a run estimated to take longer here.",
    )
    trained_dir: str = Field(
        "var/trained",
        description="Where POST /api/lab/train saves its checkpoints (the newest 8 are kept); "
        "each opens in the explorer as trained/<folder name>.",
    )
    corpus_store: str = Field(
        "var/corpus.sqlite",
        description="The corpus store (SQLite) that `atlas corpus run` writes and the head "
        "pages read.",
    )
    corpus_texts: int = Field(
        0,
        ge=0,
        le=100_000,
        description="Texts of python-docs (Debian's python3-doc) over which the server describes "
        "every head of corpus_models in the background, behind every request, for the head "
        "pages; 0: none (make run sets 200: CORPUS_TEXTS). Resumed where it stopped.",
    )
    corpus_source: str = Field(
        "python-docs",
        description="What the background corpus job reads: python-docs, or a .txt/.jsonl file or "
        "folder (docs/corpus.md).",
    )
    corpus_models: list[str] = Field(
        default_factory=lambda: [
            "sentence-transformers/all-MiniLM-L6-v2",
            "HuggingFaceTB/SmolLM2-135M-Instruct",
        ],
        description="The models the background corpus job describes, in order.",
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
    max_import_bytes: int = Field(
        64 * 2**20,
        ge=0,
        le=2**30,
        description="The largest zipped HeadVis tree POST /api/corpus/import takes (0: uploads "
        "off; `atlas corpus import DIR` has no such limit). Unzipped, a tree may be 4 times it.",
    )
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
        description="A request head must arrive within this, and its body be whole within this "
        "of its head (408).",
    )
    max_connections: int = Field(
        default_factory=default_max_connections,
        ge=1,
        description="Connections all clients may hold open; past it, 503 at once (a few more "
        "answer only GET /api/health). Half the open-file limit, at most 2,000, by default.",
    )
    max_connections_per_client: int = Field(
        256,
        ge=1,
        description="Connections one client address may hold open (trusted proxies excepted); "
        "past it, 503 at once. A class behind one NAT address is one client: 40 browsers open "
        "up to 6 connections each.",
    )
    send_timeout_seconds: float = Field(
        30.0, gt=0, le=3600, description="A reader that takes nothing for this long is dropped."
    )
    shutdown_grace_seconds: float = Field(
        20.0,
        gt=0,
        le=3600,
        description="On SIGTERM, running work stops at its next step and waiting work is "
        "refused at once; connections still open after this long are closed.",
    )
    heavy_lane_nice: int = Field(
        10,
        ge=0,
        le=19,
        description="How far below the rest of the server the heavy lane runs (Linux nice); "
        "0 on a host whose cores other busy processes share.",
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
    queue_heavy_jobs: int = Field(
        64, ge=1, le=10_000, description="Jobs that may wait for the heavy lane (then 503)."
    )
    queue_heavy_seconds: float = Field(
        120.0,
        gt=0,
        le=3600,
        description="Estimated seconds of work that may wait for the heavy lane (then 503); "
        "one client may hold half. A job that finds nothing waiting always gets in.",
    )
    queue_per_client_jobs: int = Field(
        8, ge=1, le=1000, description="Jobs one client may have waiting for the heavy lane (429)."
    )
    queue_quick_jobs: int = Field(
        256, ge=1, le=100_000, description="Jobs that may wait for the quick lane (then 503)."
    )
    trusted_proxies: list[str] = Field(
        default_factory=list,
        description="Addresses or networks (CIDR) of reverse proxies whose X-Forwarded-For is "
        "believed; empty (the default) believes no one.",
    )

    @field_validator("max_connections")
    @classmethod
    def _connections_fit_the_file_limit(cls, value: int) -> int:
        limit = open_file_limit()
        if limit is None:
            return value
        spare = min(SPARE_FILE_DESCRIPTORS, limit // 2)
        if value > limit - spare:
            raise ValueError(
                f"max_connections is {value}, but the open-file limit (ulimit -n) is {limit} and "
                f"the server needs {spare} of those for itself; lower it to at most "
                f"{limit - spare}, or raise the limit"
            )
        return value

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
