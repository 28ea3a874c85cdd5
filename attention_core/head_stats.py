"""What each head does, as numbers: statistics of its attention pattern and the roles they imply.

Input is the attention of every layer and head over one text, (layers, heads, seq, seq), rows
summing to 1 over the keys each query may see (causal maps have zeros above the diagonal),
plus what is known of each token. Every statistic is a mean over query rows, one number per
(layer, head); roles come with the score that decided them.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from functools import cached_property

import torch
from torch import Tensor

from attention_core.scratch import Scratch

STATISTICS = (
    # The order of the grids and of the corpus store's columns; what each measures: DESCRIPTIONS.
    "entropy",
    "distance",
    "first",
    "special",
    "previous",
    "self",
    "same_word",
    "max_weight",
    "separator",
    "local",
    "duplicate",
    "induction",
)
LOCAL_REACH = 3

LABELS = {
    # How a page names each statistic (the code name stays the API's key and the tooltip's).
    "entropy": "entropy",
    "distance": "distance",
    "first": "first token",
    "special": "special tokens",
    "previous": "previous token",
    "self": "self",
    "same_word": "same word",
    "max_weight": "strongest weight",
    "separator": "separators",
    "local": "nearby",
    "duplicate": "earlier copies",
    "induction": "induction",
}
DESCRIPTIONS = {
    # What each statistic measures, in a sentence: the one place its meaning is written.
    "entropy": "normalised entropy of each row: 0 = all on one key, 1 = uniform over the keys "
    "a query may see",
    "distance": "mean distance in tokens between a query and the keys it attends to",
    "first": "share of attention on the first token (attention sinks)",
    "special": "share on special tokens ([CLS], [SEP], <|endoftext|> ...)",
    "previous": "share on the token just before the query",
    "self": "share on the query token itself",
    "same_word": "share on the other pieces of the query's own word",
    "max_weight": "the largest weight of each row",
    "separator": "share on separators and punctuation",
    "local": f"share within {LOCAL_REACH} tokens on either side, the query and the token just "
    "before it excluded (those are 'self' and 'previous')",
    "duplicate": "share on earlier copies of the query token (rows that have one)",
    "induction": "share on the token that followed an earlier copy of the query and the token "
    "before it (rows inside a repeated span of two tokens or more: a word repeated alone has "
    "none)",
}

ROLES = {
    # role: (statistic that decides it, threshold). A label must tell a head apart, so each
    # threshold is set where few heads of a trained model pass it on natural text. The sink is
    # 0.9, not 0.5: on a 13-token sentence 211 of SmolLM2's 270 heads give the first token half
    # of their attention (a decoder's early rows have few keys to choose from), 55 give 0.9.
    "previous-token": ("previous", 0.5),
    "first-token (sink)": ("first", 0.9),
    "self": ("self", 0.5),
    "broad": ("entropy", 0.85),
    "separator": ("separator", 0.5),
    "local window": ("local", 0.4),
    "duplicate-token": ("duplicate", 0.3),
    "induction": ("induction", 0.3),
}
# Roles most heads of a trained model have somewhere: never the reason to open a head first.
COMMON_ROLES = ("first-token (sink)", "broad")


@dataclass(frozen=True)
class TokenFacts:
    """What is known of each token of the text, all (seq,)."""

    special: Tensor  # bool
    separator: Tensor  # bool: separators and punctuation
    word: Tensor  # int64: tokens of one word share a number; -1 for none (special tokens)
    ids: Tensor  # int64 vocabulary ids

    @cached_property
    def in_longer_word(self) -> Tensor:
        """(seq,) bool: the token's word has another piece somewhere in the text (counted once
        for the text, not per block of rows)."""
        pieces = torch.bincount(self.word[self.word >= 0], minlength=1)
        known = self.word >= 0
        return known & (pieces[self.word.clamp_min(0)] > 1)


@dataclass(frozen=True)
class HeadStatistics:
    """values[name] is a (layers, heads) tensor for each name in STATISTICS."""

    values: dict[str, Tensor]

    def roles(self, layer: int, head: int) -> list[tuple[str, float]]:
        """The roles of one head, strongest first, each with the score that decided it."""
        found = []
        for role, (name, threshold) in ROLES.items():
            score = float(self.values[name][layer, head])
            if math.isfinite(score) and score >= threshold:
                found.append((role, score))
        return sorted(found, key=lambda item: -item[1])

    def clearest(self, layers: list[int] | None = None) -> ClearestHead | None:
        """The head with the clearest specific role: of every (head, role) past its threshold,
        the roles in COMMON_ROLES aside, the one whose score is the largest multiple of its
        threshold (so an induction score of 0.65, over 0.3, beats a previous-token score of
        0.99, over 0.5); ties go to the earlier layer and head. None where no head has one.
        layers names the model's layer of each row of values (0, 1, ... by default)."""
        best: ClearestHead | None = None
        rows = self.values["entropy"].shape[0]
        for row, layer in enumerate(layers if layers is not None else range(rows)):
            for head in range(self.values["entropy"].shape[1]):
                for role, score in self.roles(row, head):
                    if role in COMMON_ROLES:
                        continue
                    statistic, threshold = ROLES[role]
                    found = ClearestHead(layer, head, role, statistic, score, threshold)
                    if best is None or found.margin > best.margin:
                        best = found
        return best


@dataclass(frozen=True)
class ClearestHead:
    """A head and the role that made it the clearest: score of statistic against threshold."""

    layer: int
    head: int
    role: str
    statistic: str
    score: float
    threshold: float

    @property
    def margin(self) -> float:
        return self.score / self.threshold


def _key_sets(
    facts: TokenFacts, rows: Tensor, keys: int, scratch: Scratch
) -> tuple[Tensor, dict[str, Tensor]]:
    """The per-row key sets of the query rows `rows` ((r,) positions) over the keys 0..keys-1
    (keys > every row: a causal block's keys end at its last row): the stacked sets
    (5, r, keys) for one einsum (same word, local, earlier copy, follows an earlier copy,
    distance) and, per row-selective statistic, which rows count (r,) bool, decided over every
    key of the text (a word's later pieces count for a causal row too). An earlier copy lies
    before its row and the key after it no later than the row, so the keys past `keys` hold
    neither; whether a row's word has another piece is TokenFacts.in_longer_word. The sets are
    the scratch's buffer "sets"."""
    i = rows.unsqueeze(1).to(torch.int32)  # (r, 1) query positions
    j = torch.arange(keys, device=rows.device, dtype=torch.int32).unsqueeze(0)  # (1, keys)
    same_id = facts.ids[rows].unsqueeze(1) == facts.ids[:keys].unsqueeze(0)  # (r, keys)
    earlier_copy = same_id & (j < i)
    # Induction needs a repeated span, not a repeated word: key j follows an earlier copy of
    # the query token whose own previous token is a copy of the query's previous token
    # (ids[j-1] == ids[i] and ids[j-2] == ids[i-1], j-1 < i). A text that repeats "the" in
    # two places has no such row; "the cat ... the cat" has one, at the second "cat".
    before = facts.ids[(rows - 1).clamp_min(0)].unsqueeze(1)  # (r, 1) the query's previous token
    same_before = (before == facts.ids[:keys].unsqueeze(0)) & (i > 0)  # (r, keys)
    follows_copy = torch.zeros_like(same_id)
    follows_copy[:, 2:] = same_id[:, 1:-1] & same_before[:, :-2] & (j[:, 1:-1] < i)
    gap = i - j  # (r, keys): how far each key lies before its query
    distance = gap.abs()
    word = facts.word[rows].unsqueeze(1)
    same_word = (word == facts.word[:keys].unsqueeze(0)) & (word >= 0) & (gap != 0)
    local = (distance <= LOCAL_REACH) & (gap != 0) & (gap != 1)
    sets = scratch.take("sets", (5, len(rows), keys), device=rows.device)  # filled in place
    for index, chosen in enumerate((same_word, local, earlier_copy, follows_copy, distance)):
        sets[index] = chosen
    counted = {
        "same_word": facts.in_longer_word[rows],
        "duplicate": earlier_copy.any(dim=-1),
        "induction": follows_copy.any(dim=-1),
    }
    return sets, counted


def _row_entropy(w: Tensor, out: Tensor | None = None) -> Tensor:
    """(..., rows): -sum w log w over the last dim (nats), a zero weight adding 0. By log and a
    product, vectorised (torch.special.entr, the same sum, took 2.8x as long on a block of
    SmolLM2 rows: its log is scalar); the clamp only keeps log(0) from making 0 x -inf. The
    terms are written in `out` (w's shape) where given, else in a new tensor."""
    terms = torch.clamp_min(w, torch.finfo(w.dtype).tiny, out=out).log_().mul_(w)
    return -terms.sum(dim=-1)


def _block_statistics(
    weights: Tensor,
    first_row: int,
    facts: TokenFacts,
    causal: bool,
    scratch: Scratch,
    visible_keys: Tensor | None = None,
) -> dict[str, tuple[Tensor, Tensor]]:
    """Per statistic, (sum over the block's counted rows (heads,), rows counted ()) for the
    query rows first_row.. of weights (heads, rows, keys): whole rows over the keys 0..keys-1,
    every later key's weight 0 (keys >= the block's last row + 1 suffices for causal maps).
    Its largest temporaries are the scratch's buffers, reused from one block to the next."""
    _, rows, keys = weights.shape
    seq = facts.ids.shape[0]
    w = weights.to(torch.float32)
    device = weights.device
    i = torch.arange(first_row, first_row + rows, device=device)  # (r,) query positions
    sets, counted = _key_sets(facts, i, keys, scratch)
    every_row = torch.ones(rows, dtype=torch.bool, device=device)

    entropy = _row_entropy(w, scratch.take("terms", tuple(w.shape), w.dtype, device))  # (H, r)
    visible = (i + 1) if causal else torch.full_like(i, seq)  # keys a query may see
    if visible_keys is not None:  # a layer whose mask hides more (a sliding window)
        visible = visible_keys.to(device)
    normalised = entropy / torch.log(visible.to(torch.float32)).clamp_min(1e-12)
    row_shares = torch.einsum("hij,kij->khi", w, sets)  # (5, H, r)
    key_sets = torch.stack([facts.special, facts.separator]).to(torch.float32)[:, :keys]
    key_shares = torch.einsum("hij,kj->khi", w, key_sets)  # (2, H, r)
    diagonal = w[:, torch.arange(rows, device=device), i.clamp_max(keys - 1)]  # (H, r): w[i, i]
    previous = w[:, torch.arange(rows, device=device), (i - 1).clamp(0, keys - 1)]  # w[i, i-1]

    per_row = {
        "entropy": (normalised, visible > 1),
        "distance": (row_shares[4], every_row),
        "first": (w[..., 0], every_row),
        "special": (key_shares[0], every_row),
        "previous": (previous, i > 0),
        "self": (diagonal, i < keys),
        "same_word": (row_shares[0], counted["same_word"]),
        "max_weight": (w.amax(dim=-1), every_row),
        "separator": (key_shares[1], every_row),
        "local": (row_shares[1], every_row),
        "duplicate": (row_shares[2], counted["duplicate"]),
        "induction": (row_shares[3], counted["induction"]),
    }
    return {
        name: (values[:, chosen].sum(dim=-1, dtype=torch.float64), chosen.sum())
        for name, (values, chosen) in per_row.items()
    }


VisibleKeys = Callable[[int, int], "Tensor | None"]
"""(first_row, stop_row) -> (rows,) the keys each query may read, where a layer's mask hides
more than causality does (a sliding window); None where it hides nothing more."""


def layer_statistics_by_rows(
    blocks: Iterable[tuple[int, Tensor]],
    facts: TokenFacts,
    causal: bool,
    visible_keys: VisibleKeys | None = None,
) -> dict[str, Tensor]:
    """Every statistic of one layer, from its maps a block of query rows at a time, so no
    (seq, seq) matrix need exist: blocks yields (first_row, weights (heads, rows, keys)), whole
    softmax rows (a causal block may stop its keys after its last row), each row once.
    visible_keys: where the layer's mask is narrower than causal, the keys each row may read
    (the entropy is normalised by their log).
    -> {name: (heads,)}; NaN where no row counts. Every statistic is a mean over rows, so the
    blocks' sums and counts add up to exactly what one pass over the whole map gives."""
    seq = facts.ids.shape[0]
    sums: dict[str, Tensor] = {}
    counts: dict[str, Tensor] = {}
    covered = 0
    scratch = Scratch()
    for first_row, weights in blocks:
        if weights.dim() != 3 or first_row + weights.shape[1] > seq:
            raise ValueError(
                f"a block of rows {first_row}.. must be (heads, rows, keys) within {seq} rows; "
                f"got {tuple(weights.shape)}"
            )
        covered += weights.shape[1]
        rows_visible = None
        if visible_keys is not None:
            rows_visible = visible_keys(first_row, first_row + weights.shape[1])
        for name, (total, count) in _block_statistics(
            weights, first_row, facts, causal, scratch, rows_visible
        ).items():
            sums[name] = sums[name] + total if name in sums else total
            counts[name] = counts[name] + count if name in counts else count
    if covered != seq:
        raise ValueError(f"the blocks cover {covered} rows; the text has {seq}")
    return {
        name: torch.where(counts[name] > 0, sums[name] / counts[name].clamp_min(1), math.nan).to(
            torch.float32
        )
        for name in STATISTICS
    }


def layer_statistics(weights: Tensor, facts: TokenFacts, causal: bool) -> dict[str, Tensor]:
    """Every statistic of one layer. weights: (heads, seq, seq) -> {name: (heads,)}.

    causal: queries see only themselves and earlier keys (the entropy is normalised by the
    log of the keys each query may see). A handful of passes over the layer's maps: shares
    on per-row key sets are one einsum over the stacked sets, shares on per-key sets one
    matrix-vector product, and the entropy one `entr`.
    """
    return layer_statistics_by_rows([(0, weights)], facts, causal)


def head_statistics(attentions: Tensor, facts: TokenFacts, *, causal: bool) -> HeadStatistics:
    """Statistics of every head. attentions: (layers, heads, seq, seq) -> HeadStatistics.

    Computed one layer at a time, so temporaries stay the size of one layer's maps.
    """
    if attentions.dim() != 4 or attentions.shape[-1] != attentions.shape[-2]:
        raise ValueError(
            f"attentions must be (layers, heads, seq, seq); got {tuple(attentions.shape)}"
        )
    seq = attentions.shape[-1]
    for name in ("special", "separator", "word", "ids"):
        if getattr(facts, name).shape != (seq,):
            raise ValueError(
                f"facts.{name} must be ({seq},); got {tuple(getattr(facts, name).shape)}"
            )
    per_layer = [layer_statistics(layer, facts, causal) for layer in attentions]
    return HeadStatistics(
        values={name: torch.stack([s[name] for s in per_layer]).float() for name in STATISTICS}
    )


# --- a padded batch of texts at once -----------------------------------------------------------


@dataclass(frozen=True)
class BatchFacts:
    """TokenFacts of a batch of texts padded on the right to T tokens, each (batch, T), and
    each text's tokens `lengths` (batch,). Padded positions: special and separator False, word
    and ids -1 (never equal to a real token's)."""

    special: Tensor
    separator: Tensor
    word: Tensor
    ids: Tensor
    lengths: Tensor

    @property
    def valid(self) -> Tensor:
        """(batch, T) bool: the real positions."""
        size = self.ids.shape[1]
        return torch.arange(size, device=self.ids.device)[None, :] < self.lengths[:, None]


@dataclass(frozen=True)
class RowSets:
    """What batch_row_values reads besides the maps, the same for every layer of a batch
    (row_sets): per (text, query, key) the key sets whose shares are statistics, stacked for
    one matrix product a row, and per (text, query) which rows each row-selective statistic
    counts."""

    sets: Tensor  # (batch, T, T, 7 + extra) float32
    counted: dict[str, Tensor]  # name -> (batch, T) bool; padded rows never
    extra: int  # the caller's key sets, last in `sets`


def row_sets(facts: BatchFacts, extra: Tensor | None = None) -> RowSets:
    """The key sets of a padded batch (see _key_sets, their one-text form): same word, nearby,
    earlier copy, follows an earlier copy, distance, special, separator, then `extra` (T, T, E)
    the caller's own, whose shares come back in RowValues.extra at no extra read of the maps."""
    batch, size = facts.ids.shape
    device = facts.ids.device
    valid = facts.valid  # (B, T)
    i = torch.arange(size, device=device)
    gap = i[:, None] - i[None, :]  # (T, T): how far each key lies before its query
    distance = gap.abs()
    pair = valid[:, :, None] & valid[:, None, :]  # (B, T, T) real query, real key
    same_id = (facts.ids[:, :, None] == facts.ids[:, None, :]) & pair
    earlier_copy = same_id & (gap > 0)
    # ids[j - 1] == ids[i] and ids[j - 2] == ids[i - 1], j - 1 < i (see _key_sets)
    before = torch.full_like(facts.ids, -2)
    before[:, 1:] = facts.ids[:, :-1]  # (B, T): each query's previous token; -2 for the first
    same_before = (before[:, :, None] == facts.ids[:, None, :]) & pair
    follows_copy = torch.zeros_like(same_id)
    follows_copy[:, :, 2:] = same_id[:, :, 1:-1] & same_before[:, :, :-2] & (gap[:, 1:-1] > 0)
    word = facts.word
    same_word = (word[:, :, None] == word[:, None, :]) & (word[:, :, None] >= 0) & (gap != 0)
    local = (distance <= LOCAL_REACH) & (gap != 0) & (gap != 1)
    more = 0 if extra is None else extra.shape[-1]
    sets = torch.empty(batch, size, size, 7 + more, device=device)  # (B, T_q, T_k, sets)
    sets[..., 0] = same_word
    sets[..., 1] = local
    sets[..., 2] = earlier_copy
    sets[..., 3] = follows_copy
    sets[..., 4] = distance
    sets[..., 5] = facts.special[:, None, :]  # the same keys for every row
    sets[..., 6] = facts.separator[:, None, :]
    if extra is not None:
        sets[..., 7:] = extra
    pieces = ((word[:, :, None] == word[:, None, :]) & (word[:, :, None] >= 0)).sum(-1)
    counted = {
        "rows": valid,
        "previous": valid & (i > 0),
        "same_word": valid & (pieces > 1),
        "duplicate": valid & earlier_copy.any(dim=-1),
        "induction": valid & follows_copy.any(dim=-1),
    }
    return RowSets(sets, counted, more)


@dataclass(frozen=True)
class RowValues:
    """Per query row of every text of a batch, what the statistics average, and which rows
    each counts. values[name] (batch, heads, T); counted[name] (batch, heads or 1, T) bool,
    padded rows never. Beside them, per row: the entropy in nats (unnormalised) and the
    weight on each of the caller's `extra` key sets (row_sets)."""

    values: dict[str, Tensor]
    counted: dict[str, Tensor]
    entropy_nats: Tensor  # (batch, heads, T)
    extra: Tensor  # (batch, heads, T, E)

    def means(self) -> dict[str, Tensor]:
        """{name: (batch, heads)}: each statistic's mean over the rows it counts, NaN where
        none does; what layer_statistics gives each text alone, within float32 rounding."""
        out = {}
        for name in STATISTICS:
            chosen = self.counted[name]
            total = torch.where(chosen, self.values[name], 0.0).sum(-1, dtype=torch.float64)
            count = chosen.sum(-1)
            out[name] = torch.where(count > 0, total / count.clamp_min(1), math.nan).float()
        return out


def batch_row_values(weights: Tensor, sets: RowSets, visible: Tensor) -> RowValues:
    """Every statistic's per-row values over a padded batch at once, each map read a few
    times for all of them (the batched form of layer_statistics_by_rows, which one text's rows
    give alike: tests/atlas_engine/corpus/test_corpus_batch.py).

    weights (batch, heads, T, T) float32, padded rows and keys exactly 0 (one layer's heads, or
    several layers' flattened); sets: row_sets of the batch; visible (batch, heads, T): the
    keys each query may read (i + 1 in a causal map, the text's length in a full one, fewer
    under a sliding window). The shares on every key set are one matrix product a row: for
    each text, (T, heads, T) @ (T, T, sets), the maps read in place through their strides."""
    batch, heads, size, _ = weights.shape
    shares = torch.stack(
        [torch.bmm(weights[b].transpose(0, 1), sets.sets[b]) for b in range(batch)]
    )  # (B, T, H, sets)
    row_shares = shares.permute(0, 3, 2, 1)  # (B, sets, H, T)
    previous = torch.zeros(batch, heads, size, dtype=weights.dtype, device=weights.device)
    previous[..., 1:] = weights.diagonal(offset=-1, dim1=-2, dim2=-1)  # w[i, i - 1]
    entropy = _row_entropy(weights)  # (B, H, T) nats
    values = {
        "entropy": entropy / torch.log(visible.to(torch.float32)).clamp_min(1e-12),
        "distance": row_shares[:, 4],
        "first": weights[..., 0],
        "special": row_shares[:, 5],
        "previous": previous,
        "self": weights.diagonal(dim1=-2, dim2=-1),
        "same_word": row_shares[:, 0],
        "max_weight": weights.amax(dim=-1),
        "separator": row_shares[:, 6],
        "local": row_shares[:, 1],
        "duplicate": row_shares[:, 2],
        "induction": row_shares[:, 3],
    }
    rows = sets.counted["rows"][:, None, :]  # (B, 1, T)
    counted = {name: rows for name in STATISTICS}
    counted["entropy"] = rows & (visible > 1)
    for name in ("previous", "same_word", "duplicate", "induction"):
        counted[name] = sets.counted[name][:, None, :]
    extra_shares = row_shares[:, 7:].permute(0, 2, 3, 1)  # (B, H, T, E)
    return RowValues(values, counted, entropy, extra_shares)
