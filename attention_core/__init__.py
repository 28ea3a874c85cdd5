"""attention_core: attention written from first principles in PyTorch, every stage visible.

Shape convention, used by every function in this package:

    q, k, v             (batch, heads, seq_len, head_dim)     any leading dims broadcast
    attention pattern   (batch, heads, q_len, k_len)          scores, weights and masks alike
    boolean masks       broadcastable to (batch, heads, q_len, k_len); True = may attend

Every function is pure: it returns what it computed (usually a small frozen dataclass
of tensors) and never stores results as a side effect. Each variant has a manual path
that is tested against PyTorch's own kernel (`F.scaled_dot_product_attention`) or
against an exact quadratic reference.

Every attention variant has one call shape and returns one type (attention_core.trace):

    variant(q, k, v, mask=None, *, causal=False, scale=True, temperature=1.0, **its_own) -> Trace

and `attend(name, ...)` runs any of them by name (VARIANTS). `scale` is read in one place,
`resolve_scale`; devices and dtypes come from the inputs.
"""

from attention_core.analysis import (
    effective_tokens,
    entropy,
    jacobian_frobenius_norm,
    max_weight,
    score_variance,
    softmax_jacobian,
    softmax_stats,
    total_variation,
    value_weighted_norms,
)
from attention_core.cost import kv_cache_bytes, pairs
from attention_core.heads import merge_heads, pool_kv_heads, repeat_kv, split_heads
from attention_core.linear import linear_attention, linear_attention_reference
from attention_core.masks import (
    MASK_KINDS,
    MaskSpec,
    bigbird_mask,
    block_sparse_mask,
    build_mask,
    causal_mask,
    custom_mask,
    dilated_window_mask,
    global_tokens_mask,
    padding_mask,
    random_mask,
    render_mask,
    sliding_window_mask,
)
from attention_core.multihead import AttentionProjections, MultiHeadResult, multi_head_attention
from attention_core.positional import (
    apply_rope,
    rope_cos_sin,
    rope_scores_by_position,
    sinusoidal_encoding,
    sinusoidal_shift_matrix,
)
from attention_core.qkspace import normalise_qk, qk_space
from attention_core.scoring import additive_attention, general_attention
from attention_core.sdpa import AttentionTrace, masked_softmax, scaled_dot_product_attention
from attention_core.sparse import sparse_attention
from attention_core.tiled import TileStep, tile_steps, tiled_attention
from attention_core.trace import Cost, Trace, resolve_scale
from attention_core.variants import VARIANTS, attend

__all__ = [
    "MASK_KINDS",
    "VARIANTS",
    "AttentionProjections",
    "AttentionTrace",
    "Cost",
    "MaskSpec",
    "MultiHeadResult",
    "TileStep",
    "Trace",
    "additive_attention",
    "apply_rope",
    "attend",
    "bigbird_mask",
    "block_sparse_mask",
    "build_mask",
    "causal_mask",
    "custom_mask",
    "dilated_window_mask",
    "effective_tokens",
    "entropy",
    "general_attention",
    "global_tokens_mask",
    "jacobian_frobenius_norm",
    "kv_cache_bytes",
    "linear_attention",
    "linear_attention_reference",
    "masked_softmax",
    "max_weight",
    "merge_heads",
    "multi_head_attention",
    "normalise_qk",
    "padding_mask",
    "pairs",
    "pool_kv_heads",
    "qk_space",
    "random_mask",
    "render_mask",
    "repeat_kv",
    "resolve_scale",
    "rope_cos_sin",
    "rope_scores_by_position",
    "scaled_dot_product_attention",
    "score_variance",
    "sinusoidal_encoding",
    "sinusoidal_shift_matrix",
    "sliding_window_mask",
    "softmax_jacobian",
    "softmax_stats",
    "sparse_attention",
    "split_heads",
    "tile_steps",
    "tiled_attention",
    "total_variation",
    "value_weighted_norms",
]
