"""The model's own predictions at every position, kept as a small top-k table.

Logits over the whole vocabulary (tokens x vocab: 100 MB for 512 SmolLM2 tokens) are never
held: the LM head runs on PREDICTION_ROWS positions at a time and only each position's
MAX_TOP_K most likely tokens are kept.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from app.models.lm_head import head_logits

MAX_TOP_K = 20
PREDICTION_ROWS = 64


def top_predictions(
    predictor: nn.Module, hidden: Tensor, k: int = MAX_TOP_K
) -> tuple[Tensor, Tensor]:
    """hidden: (T, d_model), the base model's last hidden states, on the model's device.

    Returns ids (T, k) int64 and probabilities (T, k) float32, on the host, most likely first:
    softmax over the whole vocabulary in float32, as the model's logits give it."""
    ids, probs = [], []
    with torch.inference_mode():
        for start in range(0, hidden.shape[0], PREDICTION_ROWS):
            logits = head_logits(predictor, hidden[start : start + PREDICTION_ROWS]).float()
            top = logits.log_softmax(dim=-1).topk(min(k, logits.shape[-1]), dim=-1)
            ids.append(top.indices.cpu())
            probs.append(top.values.exp().cpu())
    return torch.cat(ids), torch.cat(probs)
