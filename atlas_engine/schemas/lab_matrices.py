"""Schemas of the lab routes that compute on seeded or typed matrices: scoring functions,
FlashAttention's tiles, linear attention, positions, cost and the KV cache."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, model_validator

from atlas_engine.errors import input_rule
from atlas_engine.schemas.common import FiniteFloat, Seed, StrictModel, json_int
from atlas_engine.schemas.core import Matrix, check_qkv_matrices

Cell = float | None
Grid = list[list[float]]


class ScoringRequest(StrictModel):
    """Seeded q, k, v (or your own), scored three ways. Additive and general scoring draw their
    own weights from the seed."""

    model_config = ConfigDict(json_schema_extra={"examples": [{"n_q": 4, "n_k": 5, "d": 8}]})

    n_q: json_int(ge=1, le=32) = Field(4, description="Queries (ignored when q is given).")
    n_k: json_int(ge=1, le=32) = Field(5, description="Keys and values (ignored with k, v).")
    d: json_int(ge=1, le=64) = Field(8, description="Width of q, k and v (ignored with q).")
    d_attn: json_int(ge=1, le=64) = Field(8, description="Additive attention's hidden width.")
    seed: Seed = 0
    temperature: FiniteFloat = Field(1.0, ge=0.01, le=100)
    q: Matrix | None = Field(None, description="Your queries (q_len, d); with k and v.")
    k: Matrix | None = Field(None, description="Your keys (k_len, d).")
    v: Matrix | None = Field(None, description="Your values (k_len, d_v).")

    @model_validator(mode="after")
    def _typed_fit(self) -> ScoringRequest:
        given = [m is not None for m in (self.q, self.k, self.v)]
        if any(given) and not all(given):
            raise input_rule("send all three of q, k and v, or none (then they are seeded)")
        if all(given):
            check_qkv_matrices(self.q, self.k, self.v)
        return self


class ScoringSide(BaseModel):
    name: str
    formula: str
    scores: Grid = Field(description="(q_len, k_len), before softmax")
    weights: Grid
    output: Grid = Field(description="(q_len, d_v)")
    parameters: int = Field(description="learned numbers the score function has")
    macs: int = Field(description="multiply-accumulates to score every pair and mix values")


class ScoringResponse(BaseModel):
    q: Grid
    k: Grid
    v: Grid
    variants: list[ScoringSide]


class TilingRequest(StrictModel):
    model_config = ConfigDict(json_schema_extra={"examples": [{"n_q": 8, "n_k": 8, "d": 4}]})

    n_q: json_int(ge=1, le=48) = 8
    n_k: json_int(ge=1, le=48) = 8
    d: json_int(ge=1, le=16) = 4
    seed: Seed = 0
    block_q: json_int(ge=1, le=48) = 4
    block_k: json_int(ge=1, le=48) = 3
    causal: bool = False


class TileStepView(BaseModel):
    q_start: int
    q_stop: int
    k_start: int
    k_stop: int
    skipped: bool = Field(description="the mask forbids every pair of this tile")
    scores: list[list[Cell]] | None = Field(description="the tile's logits; null = -inf")
    row_max: list[Cell] = Field(description="running max m after the step; null = -inf")
    row_sum: list[float] = Field(description="running sum l after the step")
    correction: list[float] = Field(description="exp(m_before - m_after) applied to l and acc")
    partial_output: Grid = Field(description="acc / l: the output if these were all the keys")


class TilingResponse(BaseModel):
    q: Grid
    k: Grid
    v: Grid
    scale: float
    exact_weights: Grid
    exact_output: Grid
    tiled_output: Grid
    max_abs_diff: float = Field(description="max |tiled - exact| over the output")
    steps: list[TileStepView]
    largest_block_cells: int
    full_cells: int
    blocks_computed: int
    blocks_skipped: int


class LinearRequest(StrictModel):
    model_config = ConfigDict(json_schema_extra={"examples": [{"n": 8, "d": 4}]})

    n: json_int(ge=2, le=48) = 8
    d: json_int(ge=1, le=16) = 4
    seed: Seed = 0
    causal: bool = False


class LinearResponse(BaseModel):
    q: Grid
    k: Grid
    phi_q: Grid
    phi_k: Grid
    state: Grid = Field(description="phi(K)^T V, (d_k, d_v): all keys, or the last prefix")
    normaliser: list[float] = Field(description="sum of phi(k_j), (d_k,)")
    output: Grid = Field(description="phi(Q) (phi(K)^T V), normalised")
    output_quadratic: Grid = Field(description="(phi(Q) phi(K)^T) V, normalised: n x n order")
    reorder_max_abs_diff: float
    implied_weights: Grid
    softmax_weights: Grid = Field(description="softmax(q k^T / sqrt(d)) on the same q, k")
    mean_total_variation: float = Field(description="mean over rows of TV(implied, softmax)")
    curve_n: list[int]
    curve_macs_softmax: list[int]
    curve_macs_linear: list[int]
    crossover_n: int = Field(description="smallest n at which linear needs fewer MACs")


class PositionsRequest(StrictModel):
    model_config = ConfigDict(json_schema_extra={"examples": [{"n": 32, "d_model": 64}]})

    n: json_int(ge=2, le=128) = Field(32, description="Positions.")
    d_model: json_int(ge=2, le=256) = Field(64, description="Encoding width (even).")
    offset: json_int(ge=1, le=64) = Field(4, description="Shift shown by the shift matrix.")
    head_dim: json_int(ge=2, le=128) = Field(32, description="RoPE head width (even).")
    seed: Seed = 0

    @model_validator(mode="after")
    def _even(self) -> PositionsRequest:
        for name in ("d_model", "head_dim"):
            if getattr(self, name) % 2:
                raise input_rule(f"{name} must be even: encodings come in sin/cos pairs")
        return self


class PositionsResponse(BaseModel):
    encoding: Grid = Field(description="PE, (n, d_model)")
    encoding_dot: Grid = Field(description="PE PE^T, (n, n)")
    shift_max_error: float = Field(description="max |PE[p + offset] - M PE[p]| (float32 PE)")
    shift_matrix: Grid = Field(description="M for the offset, (d_model, d_model)")
    rope_scores: Grid = Field(description="rope(q, i) · rope(k, j), (n, n)")
    rope_diagonal_spread: float = Field(description="max spread along any diagonal")
    unrotated_score: float = Field(description="q · k without rotation")


class CostRequest(StrictModel):
    model_config = ConfigDict(json_schema_extra={"examples": [{"n": 8192, "d_k": 64}]})

    n: json_int(ge=1, le=1_000_000) = Field(8192, description="Tokens.")
    d_k: json_int(ge=1, le=4096) = 64
    d_v: json_int(ge=1, le=4096) = 64
    window: json_int(ge=0, le=1_000_000) = 256
    dilation: json_int(ge=1, le=1_000_000) = 2
    n_global: json_int(ge=0, le=1_000_000) = 2
    num_random: json_int(ge=0, le=1_000_000) = 3
    block_size: json_int(ge=1, le=1_000_000) = 64
    block_q: json_int(ge=1, le=65_536) = 128
    block_k: json_int(ge=1, le=65_536) = 64
    bytes_per_value: json_int(ge=1, le=8) = Field(2, description="2 for float16/bfloat16.")


class CostRow(BaseModel):
    kind: str
    label: str
    pairs: int
    exact: bool = Field(description="false: an upper bound (bigbird's random keys may overlap)")
    macs: int
    score_bytes: int = Field(description="if the allowed scores are held at once")


class CostResponse(BaseModel):
    n: int
    rows: list[CostRow]
    linear_macs: int
    linear_state_bytes: int = Field(description="phi(K)^T V and the normaliser")
    tiled_score_bytes: int
    curve_n: list[int]
    curve_macs: dict[str, list[int]]
    curve_score_bytes: dict[str, list[int]]


class KvCacheRequest(StrictModel):
    model_config = ConfigDict(
        json_schema_extra={
            "examples": [{"layers": 30, "heads": 9, "kv_heads": 3, "head_dim": 64, "tokens": 8192}]
        }
    )

    layers: json_int(ge=1, le=1024) = 30
    heads: json_int(ge=1, le=1024) = Field(9, description="Query heads.")
    kv_heads: json_int(ge=1, le=1024) = Field(3, description="K/V heads; must divide heads.")
    head_dim: json_int(ge=1, le=4096) = 64
    bytes_per_value: json_int(ge=1, le=8) = 2
    tokens: json_int(ge=1, le=10_000_000) = 8192
    batch: json_int(ge=1, le=4096) = 1

    @model_validator(mode="after")
    def _divides(self) -> KvCacheRequest:
        if self.heads % self.kv_heads:
            raise input_rule(
                f"kv_heads = {self.kv_heads} does not divide heads = {self.heads}: each K/V "
                "head serves the same number of query heads"
            )
        return self


class KvCacheRow(BaseModel):
    name: str
    kv_heads: int
    bytes_per_token: int
    total_bytes: int


class KvCacheResponse(BaseModel):
    rows: list[KvCacheRow] = Field(description="MHA, the configuration asked for, MQA")
    tokens: int
    batch: int
