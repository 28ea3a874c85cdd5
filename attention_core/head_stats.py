"""What each head does, as numbers: statistics of its attention pattern and the roles they imply.

Input is the attention of every layer and head over one text, (layers, heads, seq, seq), rows
summing to 1 over the keys each query may see (causal maps have zeros above the diagonal),
plus what is known of each token. Every statistic is a mean over query rows, one number per
(layer, head); roles come with the score that decided them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor

STATISTICS = (
    "entropy",  # normalised entropy: 0 = one key, 1 = uniform over the keys a query may see
    "distance",  # mean |query - key| in tokens, weighted by attention
    "first",  # share of attention on the first token
    "special",  # share on special tokens ([CLS], [SEP], <|endoftext|> ...)
    "previous",  # share on the token just before the query
    "self",  # share on the query token itself
    "same_word",  # share on other pieces of the query's own word
    "max_weight",  # the largest weight of each row
    "separator",  # share on separators and punctuation
    "local",  # share within LOCAL_REACH tokens on either side, self and previous token excluded
    "duplicate",  # share on earlier copies of the query token (rows that have one)
    "induction",  # share on the tokens after earlier copies of the query token (rows that have one)
)
LOCAL_REACH = 3

ROLES = {
    # role: (statistic that decides it, threshold)
    "previous-token": ("previous", 0.5),
    "first-token (sink)": ("first", 0.5),
    "self": ("self", 0.5),
    "broad": ("entropy", 0.85),
    "separator": ("separator", 0.5),
    "local window": ("local", 0.4),
    "duplicate-token": ("duplicate", 0.3),
    "induction": ("induction", 0.3),
}


@dataclass(frozen=True)
class TokenFacts:
    """What is known of each token of the text, all (seq,)."""

    special: Tensor  # bool
    separator: Tensor  # bool: separators and punctuation
    word: Tensor  # int64: tokens of one word share a number; -1 for none (special tokens)
    ids: Tensor  # int64 vocabulary ids


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


def _row_mean(per_row: Tensor, rows: Tensor) -> Tensor:
    """Mean over the query rows selected by `rows` (bool (seq,)); NaN when none is. (H, seq) -> (H,)."""
    if not bool(rows.any()):
        return per_row.new_full(per_row.shape[:-1], float("nan"))
    return per_row[..., rows].mean(dim=-1)


def layer_statistics(weights: Tensor, facts: TokenFacts, causal: bool) -> dict[str, Tensor]:
    """Every statistic of one layer. weights: (heads, seq, seq) -> {name: (heads,)}.

    causal: queries see only themselves and earlier keys (the entropy is normalised by the
    log of the keys each query may see). A handful of passes over the layer's maps: shares
    on per-row key sets are one einsum over the stacked sets, shares on per-key sets one
    matrix-vector product, and the entropy one `entr`.
    """
    _, seq, _ = weights.shape
    w = weights.to(torch.float32)
    device = weights.device
    positions = torch.arange(seq, device=device)
    i = positions.unsqueeze(1)  # (seq, 1) query positions
    j = positions.unsqueeze(0)  # (1, seq) key positions
    every_row = torch.ones(seq, dtype=torch.bool, device=device)

    entropy = torch.special.entr(w).sum(dim=-1)  # (H, seq), nats
    visible = (
        (positions + 1) if causal else torch.full((seq,), seq, device=device)
    )  # keys a query may see
    several = visible > 1
    normalised = entropy / torch.log(visible.to(torch.float32)).clamp_min(1e-12)

    same_id = facts.ids.unsqueeze(1) == facts.ids.unsqueeze(0)  # (seq, seq)
    earlier_copy = same_id & (j < i)
    # Induction: key j follows an earlier copy of the query token (ids[j-1] == ids[i], j-1 < i).
    follows_copy = torch.zeros(seq, seq, dtype=torch.bool, device=device)
    follows_copy[:, 1:] = same_id[:, :-1] & (j[:, :-1] < i)
    same_word = (facts.word.unsqueeze(1) == facts.word.unsqueeze(0)) & (facts.word >= 0) & (i != j)
    local = ((i - j).abs() <= LOCAL_REACH) & (i != j) & (j != i - 1)
    distance = (i - j).abs().to(torch.float32)
    row_sets = torch.stack([same_word, local, earlier_copy, follows_copy]).to(torch.float32)
    row_shares = torch.einsum("hij,kij->khi", w, torch.cat([row_sets, distance.unsqueeze(0)]))
    key_sets = torch.stack([facts.special, facts.separator]).to(torch.float32)  # (2, seq)
    key_shares = torch.einsum("hij,kj->khi", w, key_sets)
    previous = torch.diagonal(w, offset=-1, dim1=-2, dim2=-1)  # (H, seq - 1): row i, key i-1

    return {
        "entropy": _row_mean(normalised, several),
        "distance": _row_mean(row_shares[4], every_row),
        "first": _row_mean(w[..., 0], every_row),
        "special": _row_mean(key_shares[0], every_row),
        "previous": _row_mean(previous, torch.ones(seq - 1, dtype=torch.bool, device=device)),
        "self": _row_mean(torch.diagonal(w, dim1=-2, dim2=-1), every_row),
        "same_word": _row_mean(row_shares[0], same_word.any(dim=-1)),
        "max_weight": _row_mean(w.amax(dim=-1), every_row),
        "separator": _row_mean(key_shares[1], every_row),
        "local": _row_mean(row_shares[1], every_row),
        "duplicate": _row_mean(row_shares[2], earlier_copy.any(dim=-1)),
        "induction": _row_mean(row_shares[3], follows_copy.any(dim=-1)),
    }


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
