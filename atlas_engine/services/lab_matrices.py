"""The lab pages that compute on seeded or typed matrices: every number from attention_core."""

from __future__ import annotations

import math

import torch
from torch import Tensor

import attention_core as ac
from atlas_engine.errors import InvalidInput
from atlas_engine.schemas.lab_matrices import (
    CostRequest,
    CostResponse,
    CostRow,
    KvCacheRequest,
    KvCacheResponse,
    KvCacheRow,
    LinearRequest,
    LinearResponse,
    PositionsRequest,
    PositionsResponse,
    ScoringRequest,
    ScoringResponse,
    ScoringSide,
    TileStepView,
    TilingRequest,
    TilingResponse,
)
from atlas_engine.serialize import to_lists, to_lists_with_nulls
from attention_core import cost
from attention_core.analysis import total_variation
from attention_core.linear import linear_attention_weights


def _seeded(seed: int, *shape: int) -> Tensor:
    """Standard normal float64 numbers, the same for the same seed and shapes."""
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=g, dtype=torch.float64)


def _seeded_qkv(seed: int, n_q: int, n_k: int, d: int) -> tuple[Tensor, Tensor, Tensor]:
    g = torch.Generator().manual_seed(seed)
    draw = lambda *s: torch.randn(*s, generator=g, dtype=torch.float64)  # noqa: E731
    return draw(n_q, d), draw(n_k, d), draw(n_k, d)


def scoring(req: ScoringRequest) -> ScoringResponse:
    """Scaled dot-product, Luong's general and Bahdanau's additive scores on the same q, k, v."""
    if req.q is not None:
        q, k, v = (torch.tensor(m, dtype=torch.float64) for m in (req.q, req.k, req.v))
    else:
        q, k, v = _seeded_qkv(req.seed, req.n_q, req.n_k, req.d)
    n_q, d = q.shape
    n_k, d_v = v.shape
    a = req.d_attn
    weights = _seeded(req.seed + 1, 2 * a * d + a + d * d)  # additive and general parameters
    w_q = weights[: a * d].reshape(a, d) / math.sqrt(d)
    w_k = weights[a * d : 2 * a * d].reshape(a, d) / math.sqrt(d)
    v_a = weights[2 * a * d : 2 * a * d + a] / math.sqrt(a)
    w = weights[2 * a * d + a :].reshape(d, d) / math.sqrt(d)
    t = req.temperature
    mixing = n_q * n_k * d_v
    runs = [
        (
            "Scaled dot-product",
            "q·k / √d",
            ac.scaled_dot_product_attention(q, k, v, temperature=t),
            0,
            n_q * n_k * d,
        ),
        (
            "General (Luong)",
            "qᵀ W k",
            ac.general_attention(q, k, v, temperature=t, w=w),
            d * d,
            n_q * d * d + n_q * n_k * d,
        ),
        (
            "Additive (Bahdanau)",
            "vₐ · tanh(W_q q + W_k k)",
            ac.additive_attention(q, k, v, temperature=t, w_q=w_q, w_k=w_k, v_a=v_a),
            2 * a * d + a,
            a * d * (n_q + n_k) + n_q * n_k * a,
        ),
    ]
    for name, _, trace, _, _ in runs:
        if not (torch.isfinite(trace.scores).all() and torch.isfinite(trace.output).all()):
            raise InvalidInput(
                f"the {name} scores overflow float64; send smaller numbers or a larger temperature"
            )
    return ScoringResponse(
        q=to_lists(q),
        k=to_lists(k),
        v=to_lists(v),
        variants=[
            ScoringSide(
                name=name,
                formula=formula,
                scores=to_lists(trace.scores),
                weights=to_lists(trace.weights),
                output=to_lists(trace.output),
                parameters=params,
                macs=score_macs + mixing,
            )
            for name, formula, trace, params, score_macs in runs
        ],
    )


def tiling(req: TilingRequest) -> TilingResponse:
    """FlashAttention's online softmax, every tile, against exact attention on the same input."""
    q, k, v = _seeded_qkv(req.seed, req.n_q, req.n_k, req.d)
    exact = ac.scaled_dot_product_attention(q, k, v, causal=req.causal)
    tiled = ac.tiled_attention(q, k, v, causal=req.causal, block_q=req.block_q, block_k=req.block_k)
    steps = ac.tile_steps(
        q, k, v, causal=req.causal, factor=exact.scale, block_q=req.block_q, block_k=req.block_k
    )
    return TilingResponse(
        q=to_lists(q),
        k=to_lists(k),
        v=to_lists(v),
        scale=exact.scale,
        exact_weights=to_lists(exact.weights),
        exact_output=to_lists(exact.output),
        tiled_output=to_lists(tiled.output),
        max_abs_diff=float((tiled.output - exact.output).abs().max()),
        steps=[
            TileStepView(
                q_start=s.q_start,
                q_stop=s.q_stop,
                k_start=s.k_start,
                k_stop=s.k_stop,
                skipped=s.skipped,
                scores=None if s.scores is None else to_lists_with_nulls(s.scores),
                row_max=to_lists_with_nulls(s.row_max),
                row_sum=to_lists(s.row_sum),
                correction=to_lists(s.correction),
                partial_output=to_lists(s.partial_output),
            )
            for s in steps
        ],
        largest_block_cells=tiled.cost.max_block_elements,
        full_cells=req.n_q * req.n_k,
        blocks_computed=tiled.cost.blocks_computed,
        blocks_skipped=tiled.cost.blocks_skipped,
    )


CURVE_N = [2**p for p in range(4, 20)] + [1_000_000]


def linear(req: LinearRequest) -> LinearResponse:
    """Linear attention's two orders, its implied weights beside softmax's, and its cost."""
    q, k, v = _seeded_qkv(req.seed, req.n, req.n, req.d)
    trace = ac.linear_attention(q, k, v, causal=req.causal)
    quadratic = ac.linear_attention_reference(q, k, v, causal=req.causal)
    implied = linear_attention_weights(q, k, causal=req.causal)
    soft = ac.scaled_dot_product_attention(q, k, v, causal=req.causal).weights
    state = trace.stages["kv_state"]
    state = state[-1] if req.causal else state  # the last prefix: every key
    d = req.d
    macs_soft = [cost.softmax_macs(cost.pairs("none", n), d, d) for n in CURVE_N]
    macs_lin = [cost.linear_macs(n, d, d) for n in CURVE_N]
    # n^2 (2d) > 2 n d^2 + 2 n d  <=>  n > d + 1
    crossover = d + 2
    return LinearResponse(
        q=to_lists(q),
        k=to_lists(k),
        phi_q=to_lists(trace.stages["phi_q"]),
        phi_k=to_lists(trace.stages["phi_k"]),
        state=to_lists(state),
        normaliser=to_lists(trace.stages["phi_k"].sum(dim=0)),
        output=to_lists(trace.output),
        output_quadratic=to_lists(quadratic),
        reorder_max_abs_diff=float((trace.output - quadratic).abs().max()),
        implied_weights=to_lists(implied),
        softmax_weights=to_lists(soft),
        mean_total_variation=float(total_variation(implied, soft).mean()),
        curve_n=CURVE_N,
        curve_macs_softmax=macs_soft,
        curve_macs_linear=macs_lin,
        crossover_n=crossover,
    )


def positions(req: PositionsRequest) -> PositionsResponse:
    """The sinusoidal encoding and its shift matrix; RoPE's scores as a function of offset."""
    pe_all = ac.sinusoidal_encoding(req.n + req.offset, req.d_model).double()  # (n + offset, d)
    pe = pe_all[: req.n]  # (n, d)
    m = ac.sinusoidal_shift_matrix(req.offset, req.d_model)
    shifted = pe @ m.T  # (n, d): M applied to every position
    q, k = _seeded(req.seed, 2, req.head_dim)
    rope = ac.rope_scores_by_position(q, k, req.n)  # (n, n)
    diagonals = [torch.diagonal(rope, offset=o) for o in range(-req.n + 1, req.n)]
    return PositionsResponse(
        encoding=to_lists(pe),
        encoding_dot=to_lists(pe @ pe.T),
        shift_max_error=float((shifted - pe_all[req.offset :]).abs().max()),
        shift_matrix=to_lists(m),
        rope_scores=to_lists(rope),
        rope_diagonal_spread=max(float(d.max() - d.min()) for d in diagonals),
        unrotated_score=float(q @ k),
    )


COST_KINDS = (
    ("none", "Full"),
    ("causal", "Causal"),
    ("sliding_window", "Sliding window ± w (Longformer)"),
    ("sliding_window_causal", "Causal window, w back (Mistral)"),
    ("dilated", "Dilated window"),
    ("global", "Global tokens"),
    ("random", "Random keys"),
    ("bigbird", "BigBird (window + global + random)"),
    ("block_sparse", "Block-sparse"),
)


def _pairs(req: CostRequest, kind: str, n: int) -> int:
    return cost.pairs(
        kind, n, window=req.window, dilation=req.dilation, n_global=req.n_global,
        num_random=req.num_random, block_size=req.block_size,
    )  # fmt: skip


def attention_cost(req: CostRequest) -> CostResponse:
    """Pairs, MACs and score memory from the formulas, never by building a mask."""
    b = req.bytes_per_value
    rows = []
    for kind, label in COST_KINDS:
        p = _pairs(req, kind, req.n)
        rows.append(
            CostRow(
                kind=kind,
                label=label,
                pairs=p,
                exact=kind in cost.EXACT_KINDS,
                macs=cost.softmax_macs(p, req.d_k, req.d_v),
                score_bytes=cost.score_bytes(p, b),
            )
        )
    ns = sorted({*(n for n in CURVE_N if n <= req.n), req.n})
    curve_macs = {
        kind: [cost.softmax_macs(_pairs(req, kind, n), req.d_k, req.d_v) for n in ns]
        for kind in ("none", "sliding_window", "bigbird")
    }
    curve_macs["linear"] = [cost.linear_macs(n, req.d_k, req.d_v) for n in ns]
    curve_bytes = {
        "none": [cost.score_bytes(_pairs(req, "none", n), b) for n in ns],
        "tiled": [cost.tiled_score_bytes(n, req.block_q, req.block_k, b) for n in ns],
    }
    return CostResponse(
        n=req.n,
        rows=rows,
        linear_macs=cost.linear_macs(req.n, req.d_k, req.d_v),
        linear_state_bytes=(req.d_k * req.d_v + req.d_k) * b,
        tiled_score_bytes=cost.tiled_score_bytes(req.n, req.block_q, req.block_k, b),
        curve_n=ns,
        curve_macs=curve_macs,
        curve_score_bytes=curve_bytes,
    )


def _sharing_name(kv_heads: int, heads: int) -> str:
    return "MHA" if kv_heads == heads else "MQA" if kv_heads == 1 else "GQA"


def kv_cache(req: KvCacheRequest) -> KvCacheResponse:
    """KV-cache bytes of the configuration asked for, beside MHA and MQA of the same model."""
    rows = []
    for kv in (req.heads, req.kv_heads, 1):
        one = ac.kv_cache_bytes(
            1, layers=req.layers, kv_heads=kv, head_dim=req.head_dim,
            bytes_per_value=req.bytes_per_value,
        )  # fmt: skip
        rows.append(
            KvCacheRow(
                name=_sharing_name(kv, req.heads),
                kv_heads=kv,
                bytes_per_token=one,
                total_bytes=one * req.tokens * req.batch,
            )
        )
    return KvCacheResponse(rows=rows, tokens=req.tokens, batch=req.batch)
