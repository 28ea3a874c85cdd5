"""Attention maps too large to hold, read block by block (deep zoom).

With each row's softmax normaliser known (its log-sum-exp, from the online softmax of
attention_core.tiled), any block of weights is exact on its own:

    w[i, j] = exp(q_i · k_j · factor - lse_i)        (0 where the mask forbids the pair)

so a viewer can ask for one tile of full cells, or for an overview in which each cell is the
maximum or the mean of a `cell` × `cell` block of weights, and no q_len × k_len matrix is ever
held: the largest thing in memory is one (..., block, block) tile of scores.

Shapes: q (..., q_len, d), k (..., k_len, d); lse (..., q_len); the leading dims (heads) are
carried through every function.

Modern heads (attention_core.modern) read block by block too, through `Extras`: softcapped
scores (each tile's scores capped before use, so the fused scale-and-subtract is given up for
them), a sink logit per head (added to each row's normaliser: rows sum to less than 1), and a
layer's own mask beyond causal (a sliding window), built a tile at a time; a tile the mask
leaves empty is skipped.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor

from attention_core.masks import causal_mask
from attention_core.scratch import Scratch
from attention_core.tiled import tile_steps

MaskBlock = Callable[[int, int, int, int], "Tensor | None"]
"""(r0, r1, c0, c1) -> (r1 - r0, c1 - c0) bool, True where query r0 + i may read key c0 + j;
None where the block hides nothing."""


@dataclass(frozen=True)
class Extras:
    """What a modern head adds to q·k × factor before its softmax (attention_core.modern)."""

    softcap: float | None = None  # scores become tanh(s / softcap) * softcap
    sinks: Tensor | None = None  # (...,): a logit per leading index (head) in every row's sum
    mask: MaskBlock | None = None  # the layer's mask beyond causal (a sliding window)

    def capped(self, scores: Tensor) -> Tensor:
        """`scores` capped in place where softcap is set."""
        if self.softcap is not None:
            scores.div_(self.softcap).tanh_().mul_(self.softcap)
        return scores

    def hidden(self, r0: int, r1: int, c0: int, c1: int) -> Tensor | None:
        """(r, c) bool, True where the layer's own mask hides a pair; None where none is."""
        if self.mask is None:
            return None
        allowed = self.mask(r0, r1, c0, c1)
        return None if allowed is None or bool(allowed.all()) else ~allowed

    def with_sinks(self, lse: Tensor) -> Tensor:
        """Row normalisers (..., rows) with each head's sink logit added in (float64 in, out)."""
        if self.sinks is None:
            return lse
        return torch.logaddexp(lse, self.sinks.to(lse.dtype)[..., None])


PLAIN = Extras()


@dataclass(frozen=True)
class Overview:
    maximum: Tensor  # (..., ceil(q_len / cell), ceil(k_len / cell)): each block's largest weight
    mean: Tensor  # (..., same): each block's mean weight (forbidden pairs count as 0)
    cell: int
    max_tile_elements: int  # the largest score tile held at once, in elements


def row_logsumexp(q: Tensor, k: Tensor, *, causal: bool, factor: float, block: int = 256) -> Tensor:
    """(..., q_len): log of each row's softmax denominator over its allowed keys, by the online
    softmax (one (block, block) tile of scores at a time); -inf where no key is allowed."""
    empty_v = k.new_zeros((*k.shape[:-1], 0))  # (..., k_len, 0): the denominators only
    rows = []
    steps = tile_steps(q, k, empty_v, causal=causal, factor=factor, block_q=block, block_k=block)
    for step in steps:
        if step.last_for_block:
            rows.append(step.logsumexp)
    return torch.cat(rows, dim=-1)


def window_logsumexp(
    q: Tensor,
    k: Tensor,
    rows: tuple[int, int],
    *,
    causal: bool,
    factor: float,
    block: int = 256,
    between_tiles: Callable[[], None] | None = None,
    extras: Extras = PLAIN,
) -> Tensor:
    """(..., rows[1] - rows[0]): row_logsumexp for the queries rows[0]:rows[1] only (a zoomed-in
    window needs nothing else), one (block, block) tile of scores at a time; a causal row's
    keys stop at the row, so the window's cost grows with its last row, not the text.
    between_tiles, if given, is called before each tile (a caller's point to stop, or to let
    other work in: seconds pass over a long text's tiles). Every tile's scores are written in
    one buffer (Scratch)."""
    r_start, r_stop = rows
    k_len = k.shape[-2]
    lead = q.shape[:-2]
    scratch = Scratch()
    out = []
    for r0 in range(r_start, r_stop, block):
        r1 = min(r0 + block, r_stop)
        # summed across tiles in float64: float32's rounding of 32 tiles' partial sums put an
        # 8,192-token weight 1.1e-5 from the model's (the bound is 1e-5); rounded once at the end
        running = q.new_full((*lead, r1 - r0), float("-inf"), dtype=torch.float64)
        for c0 in range(0, r1 if causal else k_len, block):
            c1 = min(c0 + block, r1 if causal else k_len)
            hidden = extras.hidden(r0, r1, c0, c1)
            if hidden is not None and bool(hidden.all()):
                continue  # the layer's mask hides this whole tile (outside a sliding window)
            if between_tiles is not None:
                between_tiles()
            buffer = scratch.take("scores", (*lead, r1 - r0, c1 - c0), q.dtype, q.device)
            scores = _block_scores(q, k, (r0, r1), (c0, c1), factor, out=buffer)  # (..., r, c)
            extras.capped(scores)
            if causal:
                _hide_later_keys(scores, r0, c0, float("-inf"))
            if hidden is not None:
                scores.masked_fill_(hidden, float("-inf"))
            running = torch.logaddexp(running, torch.logsumexp(scores, dim=-1).double())
        out.append(extras.with_sinks(running).to(q.dtype))
    return torch.cat(out, dim=-1)


def row_weights(
    q: Tensor,
    k: Tensor,
    rows: tuple[int, int],
    *,
    causal: bool,
    factor: float,
    scratch: Scratch | None = None,
    extras: Extras = PLAIN,
) -> Tensor:
    """(..., rows[1] - rows[0], keys): whole softmax rows of the queries rows[0]:rows[1], over
    every key (keys = k_len), or for causal maps over the keys up to the last row (keys =
    rows[1]; every later weight is 0). Holds one (..., rows, keys) block of scores: a caller
    that walks a map a block of rows at a time sizes the block to its memory. With a scratch,
    the scores and the weights are its buffers "scores" and "weights" (the weights returned
    are overwritten by the next call with the same scratch)."""
    r0, r1 = rows
    keys = r1 if causal else k.shape[-2]
    shape = (*q.shape[:-2], r1 - r0, keys)
    scores_out = None if scratch is None else scratch.take("scores", shape, q.dtype, q.device)
    scores = _block_scores(q, k, rows, (0, keys), factor, out=scores_out)  # (..., r, keys)
    extras.capped(scores)
    if causal:
        _hide_later_keys(scores, r0, 0, float("-inf"))
    hidden = extras.hidden(r0, r1, 0, keys)
    if hidden is not None:
        scores.masked_fill_(hidden, float("-inf"))
    if extras.sinks is not None:  # the sink's share left out of the row: it sums to < 1
        lse = extras.with_sinks(torch.logsumexp(scores, dim=-1).double()).to(scores.dtype)
        return scores.sub_(lse[..., None]).exp_()
    if scratch is None:
        return torch.softmax(scores, dim=-1)
    return torch.softmax(scores, dim=-1, out=scratch.take("weights", shape, q.dtype, q.device))


def _block_scores(
    q: Tensor,
    k: Tensor,
    rows: tuple[int, int],
    cols: tuple[int, int],
    factor: float,
    plus: Tensor | None = None,
    out: Tensor | None = None,
) -> Tensor:
    """(..., rows, cols): q_i · k_j · factor (+ plus_i) for the queries rows[0]:rows[1] and the
    keys cols[0]:cols[1], by one batched GEMM (baddbmm) that scales and adds as it writes: a
    product, a scaling and a sum took three passes over the tile. plus: (..., rows, 1); out:
    a contiguous (..., rows, cols) tensor to write them in (a new one by default)."""
    r0, r1 = rows
    c0, c1 = cols
    lead, d = q.shape[:-2], q.shape[-1]
    q_block = q[..., r0:r1, :].reshape(-1, r1 - r0, d)
    keys = k[..., c0:c1, :].expand(*lead, c1 - c0, d).reshape(-1, c1 - c0, d).transpose(-2, -1)
    written = None if out is None else out.view(-1, r1 - r0, c1 - c0)
    if plus is None:
        scores = torch.baddbmm(q.new_zeros(()), q_block, keys, beta=0, alpha=factor, out=written)
    else:
        scores = torch.baddbmm(
            plus.reshape(-1, r1 - r0, 1), q_block, keys, alpha=factor, out=written
        )
    return scores.reshape(*lead, r1 - r0, c1 - c0)


def _hide_later_keys(block: Tensor, r0: int, c0: int, value: float) -> None:
    """Write `value` in place wherever a block (..., rows, cols) of queries r0.. and keys c0..
    pairs a query with a later key (a causal map's future); a block whose keys all lie at or
    before its first query has none and is left as it is."""
    rows, cols = block.shape[-2:]
    if c0 + cols > r0 + 1:
        allowed = causal_mask(rows, cols, offset=r0 - c0, device=block.device)
        block.masked_fill_(~allowed, value)


def weight_tile(
    q: Tensor,
    k: Tensor,
    lse: Tensor,
    rows: tuple[int, int],
    cols: tuple[int, int],
    *,
    causal: bool,
    factor: float,
    out: Tensor | None = None,
    extras: Extras = PLAIN,
) -> Tensor:
    """(..., rows, cols): the exact weights of queries rows[0]:rows[1] on keys cols[0]:cols[1],
    written in `out` (contiguous, that shape) where given."""
    r0, r1 = rows
    row_lse = lse[..., r0:r1, None]  # (..., r, 1)
    if extras.softcap is None:  # scaled and shifted by the GEMM as it writes
        weights = _block_scores(q, k, rows, cols, factor, plus=-row_lse, out=out).exp_()
    else:  # capped before the shift
        weights = extras.capped(_block_scores(q, k, rows, cols, factor, out=out))
        weights.sub_(row_lse).exp_()
    if causal:
        _hide_later_keys(weights, r0, cols[0], 0.0)
    hidden = extras.hidden(r0, r1, *cols)
    if hidden is not None:
        weights.masked_fill_(hidden, 0.0)
    allowed_rows = torch.isfinite(row_lse)  # a row with no allowed key has none
    if not bool(allowed_rows.all()):
        weights.masked_fill_(~allowed_rows, 0.0)
    return weights


def overview(
    q: Tensor,
    k: Tensor,
    lse: Tensor,
    cell: int,
    *,
    causal: bool,
    factor: float,
    rows: tuple[int, int] | None = None,
    cols: tuple[int, int] | None = None,
    block: int = 512,
    between_tiles: Callable[[], None] | None = None,
    extras: Extras = PLAIN,
) -> Overview:
    """The window rows × cols of the weights (all of it by default), each `cell` × `cell` block
    reduced to its maximum and its mean, computed one (block, block) tile at a time (block is
    rounded down to a multiple of cell); blocks are counted from the window's corner.
    between_tiles, if given, is called before each tile (window_logsumexp). Every tile's
    weights are written in one buffer (Scratch)."""
    if cell < 1:
        raise ValueError(f"cell must be >= 1, got {cell}")
    r_start, r_stop = rows or (0, q.shape[-2])
    c_start, c_stop = cols or (0, k.shape[-2])
    step = max(cell, block // cell * cell)
    lead = q.shape[:-2]
    out_rows, out_cols = math.ceil((r_stop - r_start) / cell), math.ceil((c_stop - c_start) / cell)
    maximum = q.new_zeros((*lead, out_rows, out_cols))
    mean = q.new_zeros((*lead, out_rows, out_cols))
    largest = 0
    scratch = Scratch()
    for r0 in range(r_start, r_stop, step):
        r1 = min(r0 + step, r_stop)
        for c0 in range(c_start, c_stop, step):
            c1 = min(c0 + step, c_stop)
            rs, cs = (r0 - r_start) // cell, (c0 - c_start) // cell
            if causal and c0 > r1 - 1:
                break  # every key of this and later tiles lies in the future: weights are 0
            if between_tiles is not None:
                between_tiles()
            buffer = scratch.take("tile", (*lead, r1 - r0, c1 - c0), q.dtype, q.device)
            tile = weight_tile(
                q, k, lse, (r0, r1), (c0, c1), causal=causal, factor=factor, out=buffer,
                extras=extras,
            )  # fmt: skip
            largest = max(largest, tile.shape[-2] * tile.shape[-1])
            # a tile holds whole blocks (its edges are multiples of cell from the corner, or the
            # window's end), so each block's max and mean are its tile's, by PyTorch's pooling
            pooled_max = pool_weights(tile, cell, "max")
            h, w = pooled_max.shape[-2:]
            maximum[..., rs : rs + h, cs : cs + w] = pooled_max
            mean[..., rs : rs + h, cs : cs + w] = pool_weights(tile, cell, "mean")
    return Overview(maximum=maximum, mean=mean, cell=cell, max_tile_elements=largest)


def pool_weights(weights: Tensor, cell: int, reduce: str = "max") -> Tensor:
    """Maps already in memory, (..., q_len, k_len), with each `cell` × `cell` block (counted
    from the corner; the last ones may be short) reduced to its maximum or its mean:
    (..., ceil(q_len / cell), ceil(k_len / cell)). What `overview` gives from q and k, for a
    thumbnail of maps that are held anyway."""
    if cell < 1:
        raise ValueError(f"cell must be >= 1, got {cell}")
    if reduce not in ("max", "mean"):
        raise ValueError(f"reduce must be 'max' or 'mean', got {reduce!r}")
    if cell == 1:
        return weights
    r, c = weights.shape[-2:]
    planes = weights.reshape(-1, r, c)  # (planes, r, c): PyTorch's pooling kernels, no padding copy
    if reduce == "max":
        pooled = F.max_pool2d(planes, cell, cell, ceil_mode=True)
    else:  # a short block's mean is over the weights it covers
        pooled = F.avg_pool2d(planes, cell, cell, ceil_mode=True, count_include_pad=False)
    return pooled.reshape(*weights.shape[:-2], *pooled.shape[-2:])
