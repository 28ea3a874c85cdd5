"""The model's own predictions at every position, kept as a small top-k table.

Logits over the whole vocabulary (tokens x vocab: 100 MB for 512 SmolLM2 tokens) are never
held: the LM head runs on PREDICTION_ROWS positions at a time, or fewer where the vocabulary
is large (lm_head.head_rows), and only each position's MAX_TOP_K most likely tokens are kept.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor, nn

from atlas_engine.models.lm_head import MAX_TOP_K, head_logits, head_rows

PREDICTION_ROWS = 64
BYTES_PER_LOGIT = 16  # the logits in float64 and their log-softmax
COMPARED_BYTES_PER_LOGIT = 64  # both runs' of those, and the KL's three terms


def top_predictions(
    predictor: nn.Module, hidden: Tensor, k: int = MAX_TOP_K
) -> tuple[Tensor, Tensor]:
    """hidden: (T, d_model), the base model's last hidden states, on the model's device.

    Returns ids (T, k) int64 and probabilities (T, k) float32, on the host, most likely first:
    softmax over the whole vocabulary of the model's logits, computed in float64 (exact to
    float32's rounding: float32's own softmax of 49,152 logits was up to 2.2e-5 off)."""
    ids, probs = [], []
    block = head_rows(predictor, BYTES_PER_LOGIT, PREDICTION_ROWS)
    with torch.inference_mode():
        for start in range(0, hidden.shape[0], block):
            logits = head_logits(predictor, hidden[start : start + block]).double()
            top = logits.log_softmax(dim=-1).topk(min(k, logits.shape[-1]), dim=-1)
            ids.append(top.indices.cpu())
            probs.append(top.values.exp().float().cpu())
    return torch.cat(ids), torch.cat(probs)


@dataclass(frozen=True)
class PredictionShift:
    """How an intervention moved the LM head's output at every position."""

    base_ids: Tensor  # (T, k) int64, the unablated run's top-k
    base_probs: Tensor  # (T, k) float32
    ids: Tensor  # (T, k) int64, the intervened run's top-k
    probs: Tensor  # (T, k) float32
    kl: Tensor  # (T,) float32: KL(base || intervened) over the whole vocabulary, in nats
    logit_change: Tensor  # (T,) float32: the base top token's logit, intervened minus base


def compare_predictions(
    predictor: nn.Module, base: Tensor, changed: Tensor, k: int = MAX_TOP_K
) -> PredictionShift:
    """base, changed: (T, d_model) last hidden states of two runs, on the model's device.
    The head runs on PREDICTION_ROWS positions of both at a time, or fewer (head_rows), never
    on (T, vocab) whole."""
    parts: dict[str, list[Tensor]] = {name: [] for name in PredictionShift.__dataclass_fields__}
    block = head_rows(predictor, COMPARED_BYTES_PER_LOGIT, PREDICTION_ROWS)
    with torch.inference_mode():
        for start in range(0, base.shape[0], block):
            rows = slice(start, start + block)
            logits_p = head_logits(predictor, base[rows]).double()  # float64: exact softmax
            logits_q = head_logits(predictor, changed[rows]).double()
            logp, logq = logits_p.log_softmax(-1), logits_q.log_softmax(-1)
            top_p, top_q = logp.topk(k, dim=-1), logq.topk(k, dim=-1)
            first = top_p.indices[:, :1]
            found = {
                "base_ids": top_p.indices, "base_probs": top_p.values.exp(),
                "ids": top_q.indices, "probs": top_q.values.exp(),
                "kl": (logp.exp() * (logp - logq)).sum(-1).clamp_min(0),
                "logit_change": (logits_q.gather(-1, first) - logits_p.gather(-1, first))[:, 0],
            }  # fmt: skip
            for name, value in found.items():
                parts[name].append(value.cpu())
    return PredictionShift(**{name: torch.cat(values) for name, values in parts.items()})
