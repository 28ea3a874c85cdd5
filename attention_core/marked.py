"""How much each head attends to a set of marked tokens: a passage, a word found in a long text.

The share of a query row's attention that falls on the marked keys, averaged over chosen
reader rows: by default the rows that read them from elsewhere (not marked themselves and, in a
causal model, after the first marked token, since earlier rows cannot see it). Retrieval heads
fetch a passage from far back only where it is needed: read from the row that asks for it (the
last token of "... What is the pass key? The pass key is"), they give it most of their
attention, while their mean over every later row stays small. Computed a block of query rows at
a time, like attention_core.head_stats, so no (seq, seq) matrix need exist.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

import torch
from torch import Tensor


class MarkedShare:
    """Accumulates, block by block, each head's mean share of attention on the marked keys.

    marked: (seq,) bool, the marked tokens; heads: how many heads the blocks hold; causal:
    whether rows see only earlier keys; readers: (seq,) bool, the rows to average over (None:
    the rows that read the marked tokens from elsewhere, as above). add(first_row, weights)
    takes whole softmax rows, weights (heads, rows, keys) with keys the first `keys` of the text
    (a causal block may stop after its last row); span() says which rows can count; values() is
    (heads,) float32, NaN for every head where no row qualified (or none was added).
    """

    def __init__(
        self, marked: Tensor, heads: int, causal: bool, readers: Tensor | None = None
    ) -> None:
        for name, mask in (("marked", marked), ("readers", readers)):
            if mask is not None and (mask.dim() != 1 or mask.dtype != torch.bool):
                raise ValueError(f"{name} must be a (seq,) bool tensor; got {tuple(mask.shape)}")
        if readers is not None and readers.shape != marked.shape:
            raise ValueError(f"readers {tuple(readers.shape)} and marked {tuple(marked.shape)}")
        self.marked = marked
        self.causal = causal
        self.readers = readers
        positions = marked.nonzero()
        self.first = int(positions[0]) if positions.numel() else None
        self.total = torch.zeros(heads, dtype=torch.float64, device=marked.device)
        self.rows = 0

    def add(self, first_row: int, weights: Tensor) -> None:
        heads, rows, keys = weights.shape
        if first_row + rows > self.marked.shape[0] or keys > self.marked.shape[0]:
            raise ValueError(
                f"rows {first_row}..{first_row + rows} and {keys} keys exceed the "
                f"{self.marked.shape[0]} marked tokens' text"
            )
        if heads != self.total.shape[0]:
            raise ValueError(f"a block of {heads} heads; the share counts {self.total.shape[0]}")
        if self.first is None:
            return
        if self.readers is not None:
            counted = self.readers[first_row : first_row + rows]
        else:
            counted = ~self.marked[first_row : first_row + rows]
            if self.causal:
                rows_at = torch.arange(first_row, first_row + rows, device=self.marked.device)
                counted &= rows_at > self.first
        if not counted.any():
            return
        marked_keys = self.marked[:keys].to(weights.device, weights.dtype)
        on_marked = weights @ marked_keys  # (heads, rows): each row's share, no copy of the block
        self.total += (
            on_marked[:, counted.to(weights.device)]
            .sum(dim=-1, dtype=torch.float64)
            .to(self.total.device)
        )
        self.rows += int(counted.sum())

    def span(self) -> tuple[int, int] | None:
        """(first, stop): the rows that can count, so a caller can compute only those; None
        where none can (no token marked)."""
        if self.first is None:
            return None
        if self.readers is not None:
            rows = self.readers.nonzero()
            return (int(rows[0]), int(rows[-1]) + 1) if rows.numel() else None
        return (self.first + 1 if self.causal else 0), self.marked.shape[0]

    def values(self) -> Tensor:
        if self.rows == 0:
            return torch.full_like(self.total, math.nan, dtype=torch.float32)
        return (self.total / self.rows).to(torch.float32)


def marked_share(
    blocks: Iterable[tuple[int, Tensor]],
    marked: Tensor,
    *,
    causal: bool,
    readers: Tensor | None = None,
) -> Tensor:
    """Each head's mean share of attention on the marked tokens over the reader rows, from
    blocks of query rows (first_row, weights (heads, rows, keys)) -> (heads,); a whole layer's
    maps are one block. No blocks: an empty (0,) answer."""
    share = None
    for first_row, weights in blocks:
        if share is None:
            share = MarkedShare(marked, weights.shape[0], causal, readers)
        share.add(first_row, weights)
    return torch.empty(0, device=marked.device) if share is None else share.values()
