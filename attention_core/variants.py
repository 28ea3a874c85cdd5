"""Every attention variant by name, behind one call shape (see attention_core.trace).

attend("tiled", q, k, v, mask, causal=True, block_q=16, block_k=16) -> Trace
"""

from __future__ import annotations

from collections.abc import Callable

from torch import Tensor

from attention_core.linear import linear_attention
from attention_core.scoring import additive_attention, general_attention
from attention_core.sdpa import scaled_dot_product_attention
from attention_core.sparse import sparse_attention
from attention_core.tiled import tiled_attention
from attention_core.trace import Trace

VARIANTS: dict[str, Callable[..., Trace]] = {
    "dot": scaled_dot_product_attention,  # softmax(q k^T * scale / T) @ v, every stage kept
    "tiled": tiled_attention,  # the same, one tile at a time with an online softmax
    "sparse": sparse_attention,  # the same, scoring only the pairs the mask allows
    "linear": linear_attention,  # phi(q) (phi(k)^T v): no n x n matrix
    "additive": additive_attention,  # Bahdanau: v_a . tanh(W_q q + W_k k)
    "general": general_attention,  # Luong: q^T W k
}


def attend(
    variant: str, q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None = None, **options
) -> Trace:
    """Run the named variant: options are causal, scale, temperature and the variant's own
    (tiled: block_q, block_k; additive: w_q, w_k, v_a; general: w; linear: implied_weights)."""
    if variant not in VARIANTS:
        raise ValueError(f"unknown attention variant {variant!r}; one of {sorted(VARIANTS)}")
    return VARIANTS[variant](q, k, v, mask, **options)
