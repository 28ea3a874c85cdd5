"""What attention costs, from formulas: pairs scored, multiply-accumulates, score memory and
KV-cache bytes, for sequence lengths far past anything that could be built as a mask.

Every pair count is an exact integer formula (tests hold each against the mask it describes),
so n = 10**6 costs nothing to ask about. Per head and per layer unless a name says otherwise.
"""

from __future__ import annotations

from collections.abc import Sequence

EXACT_KINDS = (
    "none", "causal", "sliding_window", "sliding_window_causal", "dilated", "global", "random",
    "block_sparse",
)  # fmt: skip
"""Mask kinds whose pair count is exact; bigbird's is an upper bound (its random keys may
land inside the window or on a global token)."""


def _window_pairs(n: int, window: int) -> int:
    """(i, j) with |i - j| <= window, both in [0, n)."""
    w = min(window, max(n - 1, 0))
    return n * (2 * w + 1) - w * (w + 1)


def _causal_window_pairs(n: int, window: int) -> int:
    """(i, j) with 0 <= i - j <= window."""
    w = min(window, max(n - 1, 0))
    return n * (w + 1) - w * (w + 1) // 2


def _dilated_pairs(n: int, window: int, dilation: int) -> int:
    """(i, j) with |i - j| = s * dilation for s in 0..window."""
    reach = min(window, (n - 1) // dilation) if n else 0
    # each s >= 1 pairs n - s*d queries on both sides: sum_{s=1..reach} 2 (n - s d)
    return n + 2 * (reach * n - dilation * reach * (reach + 1) // 2)


def _global_pairs(n: int, n_global: int) -> int:
    """g global tokens: their g rows and g columns, counted once."""
    g = min(n_global, n)
    return g * (2 * n - g)


def _block_pairs(n: int, block_size: int) -> int:
    """Block-diagonal blocks of block_size (the last one partial)."""
    full, rest = divmod(n, block_size)
    return full * block_size * block_size + rest * rest


def pairs(
    kind: str,
    n: int,
    *,
    window: int = 0,
    dilation: int = 1,
    n_global: int = 0,
    num_random: int = 0,
    block_size: int = 1,
) -> int:
    """(query, key) pairs the mask `kind` (attention_core.masks) allows on n tokens.

    Exact for EXACT_KINDS; for bigbird, window + global + random pairs added up, an upper
    bound on the union. n may be any size: nothing is built."""
    if n < 0:
        raise ValueError(f"n must be >= 0; got {n}")
    if kind == "none":
        return n * n
    if kind == "causal":
        return n * (n + 1) // 2
    if kind == "sliding_window":
        return _window_pairs(n, window)
    if kind == "sliding_window_causal":
        return _causal_window_pairs(n, window)
    if kind == "dilated":
        if dilation < 1:
            raise ValueError(f"dilation must be >= 1; got {dilation}")
        return _dilated_pairs(n, window, dilation)
    if kind == "global":
        return _global_pairs(n, n_global)
    if kind == "random":
        return n * min(num_random, n)
    if kind == "block_sparse":
        if block_size < 1:
            raise ValueError(f"block_size must be >= 1; got {block_size}")
        return _block_pairs(n, block_size)
    if kind == "bigbird":
        return min(
            n * n,
            _window_pairs(n, window) + _global_pairs(n, n_global) + n * min(num_random, n),
        )
    raise ValueError(f"no pair formula for mask {kind!r}; one of {[*EXACT_KINDS, 'bigbird']}")


def softmax_macs(pairs_scored: int, d_k: int, d_v: int) -> int:
    """Multiply-accumulates of softmax attention over those pairs: q·k for each pair (d_k) and
    the weighted sum of values (d_v). The softmax itself adds O(pairs) exps, not counted."""
    return pairs_scored * (d_k + d_v)


def linear_macs(n: int, d_k: int, d_v: int) -> int:
    """Linear attention phi(Q) (phi(K)^T V) on n tokens: the d_k x d_v state (n d_k d_v), each
    query against it (n d_k d_v), and the normaliser phi(q)·sum phi(k) (2 n d_k)."""
    return 2 * n * d_k * d_v + 2 * n * d_k


def score_bytes(pairs_held: int, bytes_per_value: int = 4) -> int:
    """Memory of a score (or weight) matrix holding that many entries."""
    return pairs_held * bytes_per_value


def tiled_score_bytes(n: int, block_q: int, block_k: int, bytes_per_value: int = 4) -> int:
    """The largest score block the tiled (FlashAttention) order holds at once."""
    return min(n, block_q) * min(n, block_k) * bytes_per_value


def kv_cache_bytes(
    tokens: int, *, layers: int, kv_heads: int, head_dim: int, bytes_per_value: int = 2,
    batch: int = 1,
) -> int:  # fmt: skip
    """Keys and values kept for `tokens` cached positions: 2 x layers x kv_heads x head_dim."""
    return 2 * layers * kv_heads * head_dim * bytes_per_value * tokens * batch


def sharing_options(n_heads: int) -> Sequence[int]:
    """Every K/V head count that can serve n_heads query heads (the divisors of n_heads):
    n_heads is multi-head attention, 1 is MQA, the rest GQA."""
    return [g for g in range(n_heads, 0, -1) if n_heads % g == 0]
