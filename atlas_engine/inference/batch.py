"""A padded batch through the model in one forward pass, for the padding lab."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from atlas_engine.inference.tokens import display_tokens
from atlas_engine.models.loader import LoadedModel
from atlas_engine.models.placement import model_device


@dataclass(frozen=True)
class PaddedBatch:
    tokens: list[list[str]]  # display labels, padded
    attention_mask: Tensor  # (batch, seq): 1 real token, 0 padding
    layer_maps: Tensor  # (batch, heads, seq, seq) of the asked layer


def run_padded_batch(loaded: LoadedModel, sentences: list[str], layer: int) -> PaddedBatch:
    """Tokenize the sentences padded to the longest, run them as one batch with attention
    output, and keep one layer's maps. Token counts are checked by the caller."""
    encoding = loaded.tokenizer(sentences, padding=True, return_tensors="pt", truncation=False)
    inputs = {k: v for k, v in encoding.items() if k in ("input_ids", "attention_mask",
                                                          "token_type_ids")}  # fmt: skip
    device = model_device(loaded.model)
    with loaded.lock, torch.inference_mode():
        output = loaded.model(
            **{k: v.to(device) for k, v in inputs.items()}, output_attentions=True
        )
    maps = output.attentions[layer].float().cpu()  # (B, H, T, T)
    labels = [display_tokens(loaded.tokenizer, ids.tolist())[0] for ids in inputs["input_ids"]]
    return PaddedBatch(tokens=labels, attention_mask=inputs["attention_mask"], layer_maps=maps)
