"""Attention masks as functions that return boolean tensors (True = may attend).

Every mask is (q_len, k_len) unless said otherwise, so masks combine with `&` and `|`
and broadcast over (batch, heads, q_len, k_len). Nothing here edits a tensor in place.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import Tensor


def _positions(q_len: int, k_len: int, device: torch.device | None) -> tuple[Tensor, Tensor]:
    """Query positions as a column (q_len, 1) and key positions as a row (1, k_len)."""
    if q_len < 0 or k_len < 0:
        raise ValueError(f"lengths must be non-negative; got q_len={q_len}, k_len={k_len}")
    i = torch.arange(q_len, device=device).unsqueeze(1)
    j = torch.arange(k_len, device=device).unsqueeze(0)
    return i, j


def causal_mask(
    q_len: int, k_len: int | None = None, *, offset: int = 0, device: torch.device | None = None
) -> Tensor:
    """Query i sees key j when j <= i + offset. (q_len, k_len).

    offset=0 is the usual top-left aligned mask (PyTorch's is_causal); with a KV cache of
    `past` tokens, pass offset=past so the new queries see everything before them.
    """
    k_len = q_len if k_len is None else k_len
    i, j = _positions(q_len, k_len, device)
    return j <= i + offset


def padding_mask(
    attention_mask: Tensor | None = None,
    *,
    lengths: Tensor | Sequence[int] | None = None,
    k_len: int | None = None,
) -> Tensor:
    """Keys that are real tokens, from a 0/1 attention mask or from sequence lengths.

    attention_mask: (batch, k_len) with 1 for real tokens; or lengths: (batch,) with k_len.
    Returns (batch, 1, 1, k_len), broadcastable over heads and queries.
    """
    if (attention_mask is None) == (lengths is None):
        raise ValueError("pass exactly one of attention_mask or lengths")
    if attention_mask is not None:
        if attention_mask.dim() != 2:
            raise ValueError(
                f"attention_mask must be (batch, k_len); got shape {tuple(attention_mask.shape)}"
            )
        keep = attention_mask.bool()
    else:
        lengths = torch.as_tensor(lengths)
        if lengths.dim() != 1:
            raise ValueError(f"lengths must be (batch,); got shape {tuple(lengths.shape)}")
        k_len = int(lengths.max()) if k_len is None else k_len
        if (lengths < 0).any() or (lengths > k_len).any():
            raise ValueError(f"lengths must lie in [0, {k_len}]; got {lengths.tolist()}")
        keep = torch.arange(k_len, device=lengths.device).unsqueeze(0) < lengths.unsqueeze(
            1
        )  # (batch, k_len)
    return keep[:, None, None, :]


def sliding_window_mask(
    q_len: int,
    k_len: int | None = None,
    *,
    window: int,
    causal: bool = False,
    device: torch.device | None = None,
) -> Tensor:
    """Each query sees keys at distance at most `window`: |i - j| <= window. (q_len, k_len).

    With causal=True only the past side is kept: 0 <= i - j <= window, so a query
    sees itself and the `window` keys before it.
    """
    if window < 0:
        raise ValueError(f"window must be >= 0; got {window}")
    k_len = q_len if k_len is None else k_len
    i, j = _positions(q_len, k_len, device)
    distance = i - j
    if causal:
        return (distance >= 0) & (distance <= window)
    return distance.abs() <= window


def dilated_window_mask(
    q_len: int,
    k_len: int | None = None,
    *,
    window: int,
    dilation: int,
    device: torch.device | None = None,
) -> Tensor:
    """A sliding window with gaps: keys j = i ± d·s for s in 0..window. (q_len, k_len).

    Reaches window·dilation positions away while computing only 2·window + 1 pairs a row.
    """
    if window < 0 or dilation < 1:
        raise ValueError(
            f"need window >= 0 and dilation >= 1; got window={window}, dilation={dilation}"
        )
    k_len = q_len if k_len is None else k_len
    i, j = _positions(q_len, k_len, device)
    distance = (i - j).abs()
    return (distance <= window * dilation) & (distance % dilation == 0)


def global_tokens_mask(
    q_len: int,
    k_len: int | None = None,
    *,
    indices: Sequence[int],
    device: torch.device | None = None,
) -> Tensor:
    """Global tokens see every key and are seen by every query. (q_len, k_len)."""
    k_len = q_len if k_len is None else k_len
    n = min(q_len, k_len)
    bad = [t for t in indices if not 0 <= t < n]
    if bad:
        raise ValueError(f"global token indices must lie in [0, {n}); got {bad}")
    idx = torch.as_tensor(list(indices), dtype=torch.long, device=device)
    rows = torch.zeros(q_len, dtype=torch.bool, device=device).index_fill(0, idx, True)
    cols = torch.zeros(k_len, dtype=torch.bool, device=device).index_fill(0, idx, True)
    return rows.unsqueeze(1) | cols.unsqueeze(0)


def random_mask(
    q_len: int,
    k_len: int | None = None,
    *,
    num_random: int,
    seed: int = 0,
    device: torch.device | None = None,
) -> Tensor:
    """Each query sees `num_random` keys drawn without replacement, reproducibly. (q_len, k_len)."""
    k_len = q_len if k_len is None else k_len
    if not 0 <= num_random <= k_len:
        raise ValueError(f"num_random must lie in [0, k_len={k_len}]; got {num_random}")
    generator = torch.Generator().manual_seed(seed)
    ranks = torch.rand(q_len, k_len, generator=generator).argsort(dim=-1)  # a permutation a row
    chosen = ranks[:, :num_random]
    mask = torch.zeros(q_len, k_len, dtype=torch.bool).scatter(1, chosen, True)
    return mask.to(device) if device is not None else mask


def bigbird_mask(
    n: int,
    *,
    window: int,
    global_indices: Sequence[int],
    num_random: int,
    seed: int = 0,
    device: torch.device | None = None,
) -> Tensor:
    """BigBird's pattern: sliding window | global tokens | random keys. (n, n)."""
    return (
        sliding_window_mask(n, window=window, device=device)
        | global_tokens_mask(n, indices=global_indices, device=device)
        | random_mask(n, num_random=num_random, seed=seed, device=device)
    )


def block_sparse_mask(
    n: int,
    *,
    block_size: int,
    layout: Tensor | None = None,
    device: torch.device | None = None,
) -> Tensor:
    """Attention allowed block by block. (n, n).

    layout: bool (n_blocks, n_blocks) saying which query block sees which key block;
    by default block-diagonal (each block sees only itself). The last block may be partial.
    """
    if block_size < 1:
        raise ValueError(f"block_size must be >= 1; got {block_size}")
    n_blocks = -(-n // block_size)
    if layout is None:
        layout = torch.eye(n_blocks, dtype=torch.bool, device=device)
    if layout.dtype != torch.bool or tuple(layout.shape) != (n_blocks, n_blocks):
        raise ValueError(
            f"layout must be bool ({n_blocks}, {n_blocks}) for n={n}, block_size={block_size}; "
            f"got {layout.dtype} {tuple(layout.shape)}"
        )
    block_of = torch.arange(n, device=device) // block_size  # (n,)
    return layout[block_of][:, block_of]


def custom_mask(matrix: Tensor | Sequence[Sequence[bool]]) -> Tensor:
    """Any boolean (q_len, k_len) matrix, checked and returned as a bool tensor."""
    mask = torch.as_tensor(matrix)
    if mask.dim() != 2:
        raise ValueError(f"a custom mask must be 2-D (q_len, k_len); got shape {tuple(mask.shape)}")
    if mask.dtype != torch.bool:
        if mask.is_floating_point() or not ((mask == 0) | (mask == 1)).all():
            raise ValueError("a custom mask must hold booleans or 0/1 integers")
        mask = mask.bool()
    return mask


@dataclass(frozen=True)
class MaskRendering:
    """What a mask does, shown both ways. Both (q_len, k_len)."""

    additive: Tensor  # 0 where allowed, -inf where forbidden: added to scores before softmax
    pattern: Tensor  # 1 where a weight may be non-zero, 0 where softmax gives exactly 0
    computed_pairs: int  # number of allowed (query, key) pairs
    full_pairs: int  # q_len * k_len, what full attention computes


def render_mask(mask: Tensor, dtype: torch.dtype = torch.float32) -> MaskRendering:
    """The -inf matrix before softmax and the 0/1 pattern after, plus its cost in pairs."""
    if mask.dtype != torch.bool:
        raise ValueError(f"mask must be boolean; got dtype {mask.dtype}")
    zeros = torch.zeros(mask.shape, dtype=dtype, device=mask.device)
    additive = zeros.masked_fill(~mask, float("-inf"))
    return MaskRendering(
        additive=additive,
        pattern=mask.to(dtype),
        computed_pairs=int(mask.sum()),
        full_pairs=mask.numel(),
    )


MASK_KINDS = (
    "none", "causal", "sliding_window", "sliding_window_causal", "dilated", "global", "random",
    "bigbird", "block_sparse", "custom",
)  # fmt: skip
"""Every mask attention_core builds by name (build_mask): the one list of them."""


@dataclass(frozen=True)
class MaskSpec:
    """A mask by name and its parameters; build_mask turns it into a (q_len, k_len) tensor.
    window: reach (each side, or back for sliding_window_causal); dilation: the step of a
    dilated window; global_tokens: indices that see and are seen by all; num_random and
    seed: random keys a row; block_size: block-sparse blocks; custom: the matrix itself."""

    kind: str
    window: int | None = None
    dilation: int = 2
    global_tokens: tuple[int, ...] = (0,)
    num_random: int = 2
    seed: int = 0
    block_size: int = 4
    custom: Sequence[Sequence[bool]] | None = None


SQUARE_ONLY = ("sliding_window", "sliding_window_causal", "dilated", "bigbird", "block_sparse")
NEEDS_WINDOW = ("sliding_window", "sliding_window_causal", "dilated", "bigbird")


def build_mask(spec: MaskSpec, q_len: int, k_len: int | None = None, device=None) -> Tensor:
    """The (q_len, k_len) boolean mask `spec` names; True = may attend. Random picks are
    capped at k_len; a kind that needs a window or a square matrix says so (ValueError)."""
    k_len = q_len if k_len is None else k_len
    kind = spec.kind
    if kind not in MASK_KINDS:
        raise ValueError(f"unknown mask {kind!r}; one of {list(MASK_KINDS)}")
    if kind in SQUARE_ONLY and q_len != k_len:
        raise ValueError(f"the {kind} mask needs q_len == k_len; got {q_len} and {k_len}")
    if kind in NEEDS_WINDOW and spec.window is None:
        raise ValueError(f"the {kind} mask needs a window")
    n = q_len
    if kind == "none":
        return torch.ones(q_len, k_len, dtype=torch.bool, device=device)
    if kind == "causal":
        return causal_mask(q_len, k_len, device=device)
    if kind in ("sliding_window", "sliding_window_causal"):
        causal = kind == "sliding_window_causal"
        return sliding_window_mask(n, window=spec.window, causal=causal, device=device)
    if kind == "dilated":
        return dilated_window_mask(n, window=spec.window, dilation=spec.dilation, device=device)
    if kind == "global":
        return global_tokens_mask(q_len, k_len, indices=list(spec.global_tokens), device=device)
    if kind == "random":
        picks = min(spec.num_random, k_len)
        return random_mask(q_len, k_len, num_random=picks, seed=spec.seed, device=device)
    if kind == "bigbird":
        return bigbird_mask(
            n,
            window=spec.window,
            global_indices=list(spec.global_tokens),
            num_random=min(spec.num_random, n),
            seed=spec.seed,
            device=device,
        )
    if kind == "block_sparse":
        return block_sparse_mask(n, block_size=spec.block_size, device=device)
    if spec.custom is None:
        raise ValueError("the custom mask needs its matrix")
    return custom_mask(spec.custom)
