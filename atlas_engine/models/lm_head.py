"""Which checkpoints can predict tokens: a decoder's next token, an encoder's masked tokens.

A model is loaded with its language-model head where its family has one (AutoModelForCausalLM,
AutoModelForMaskedLM). When the checkpoint carries no head weights (MiniLM is a sentence
encoder), the head transformers made up is random, so it is dropped and the model cannot
predict; everything else works on its base model as before.
"""

from __future__ import annotations

from typing import Literal

import torch
from torch import Tensor, nn
from transformers import AutoModel, AutoModelForCausalLM, AutoModelForMaskedLM

from atlas_engine.models.registry import Family

Predicts = Literal["next_token", "masked"]
PREDICTS: dict[Family, Predicts] = {
    Family.BERT: "masked",
    Family.GPT2: "next_token",
    Family.LLAMA: "next_token",
}
MAX_TOP_K = 20
"""Each position's most likely tokens a forward pass keeps of its LM head's predictions
(inference/predictions.py), and so the most a request's `top_k` may ask for (the schemas)."""
HEAD_PREFIXES = ("cls.", "lm_head.", "vocab_transform.", "vocab_layer_norm.", "vocab_projector.")
"""Weights of a language-model head (BERT, RoBERTa, DistilBERT, GPT-2 and Llama names)."""
BASE_ONLY_UNUSED = ("pooler.",)
"""Weights of a base checkpoint that a with-head class has no place for (BertModel's pooler)."""


def head_kind(family: Family | None, config: dict | None) -> Predicts | None:
    """What a checkpoint's LM head would predict: its family's kind, or for another
    architecture what config.json's `architectures` names (a ...ForCausalLM checkpoint
    predicts the next token, a ...ForMaskedLM one masked tokens); None: no head to load."""
    if family in PREDICTS:
        return PREDICTS[family]
    names = (config or {}).get("architectures") or []
    if any(str(name).endswith("ForCausalLM") for name in names):
        return "next_token"
    if any(str(name).endswith("ForMaskedLM") for name in names):
        return "masked"
    return None


KIND_CLASSES = {"next_token": AutoModelForCausalLM, "masked": AutoModelForMaskedLM}


def auto_class(kind: Predicts | None):
    """The transformers class to load a checkpoint whose head predicts `kind` with."""
    return KIND_CLASSES.get(kind, AutoModel)


def split_head(
    model: nn.Module, loading: dict, kind: Predicts | None
) -> tuple[nn.Module, nn.Module | None, dict]:
    """(base model, the with-head model or None, loading info without what the split explains).

    The base model is what attention reads (its layers are the with-head model's own); the
    with-head model is kept only when the checkpoint had the head's weights."""
    if kind is None:
        return model, None, loading
    missing_head = [k for k in loading["missing_keys"] if k.startswith(HEAD_PREFIXES)]
    rest = {
        **loading,
        "missing_keys": [k for k in loading["missing_keys"] if k not in missing_head],
        "unexpected_keys": [
            k for k in loading["unexpected_keys"] if not k.startswith(BASE_ONLY_UNUSED)
        ],
    }
    return model.base_model, (None if missing_head else model), rest


HEAD_BLOCK_BYTES = 64 * 2**20
"""What the logits of one block of positions put through the LM head may hold, with the
temporaries made from them: within the working margin of the memory bound (app.memory), like
one layer's temporaries of a pass, for any vocabulary (Gemma 3's 262,144 tokens take 1 MiB a
position in float32, SmolLM2's 49,152 0.19 MiB). The rows of a block change no bit of them."""


def head_rows(predictor: nn.Module, bytes_per_logit: int, most: int) -> int:
    """How many positions to put through the head at once (at most `most`, at least one), so
    that a block's logits and what is computed from them, `bytes_per_logit` for each, stay
    within HEAD_BLOCK_BYTES."""
    head = predictor.get_output_embeddings()
    vocab = head.weight.shape[0] if head is not None else predictor.config.vocab_size
    return max(1, min(most, HEAD_BLOCK_BYTES // (vocab * bytes_per_logit)))


def head_logits(predictor: nn.Module, hidden: Tensor) -> Tensor:
    """The LM head alone on the base model's last hidden states: (..., d_model) -> (..., vocab).

    The same modules the with-head model's forward applies after its base model, so a caller
    can run them on a few positions at a time instead of holding (tokens, vocab) logits."""
    if hasattr(predictor, "cls"):  # BertForMaskedLM: transform, then decoder
        return predictor.cls(hidden)
    if hasattr(predictor, "vocab_projector"):  # DistilBertForMaskedLM
        h = predictor.vocab_layer_norm(predictor.activation(predictor.vocab_transform(hidden)))
        return predictor.vocab_projector(h)
    logits = predictor.lm_head(hidden)  # causal LMs, RobertaForMaskedLM
    cap = getattr(predictor.config, "final_logit_softcapping", None)
    if cap is not None:  # Gemma 2: the logits capped as its forward caps them
        if logits.requires_grad:
            return torch.tanh(logits / cap) * cap
        return logits.div_(cap).tanh_().mul_(cap)  # the same values, no (n, vocab) temporaries
    return logits


def no_head_reason(model_id: str, kind: Predicts | None) -> str:
    what = "masked-language-model" if kind == "masked" else "language-model"
    return (
        f"'{model_id}' has no {what} head in its checkpoint (a sentence encoder or a base model "
        "saved without one), so it cannot predict tokens; its attention is all there is. Load a "
        "checkpoint saved with its head (for example BertForMaskedLM or a causal LM)."
    )
