"""What /api/models says about each model, without loading it."""

from __future__ import annotations

from atlas_engine.models.capture import replay_refusal_of
from atlas_engine.models.families import architecture_from_dict
from atlas_engine.models.loader import FULL_MAPS_MAX_TOKENS, predicts_of, token_limit_of
from atlas_engine.models.manager import ModelManager
from atlas_engine.models.registry import Source
from atlas_engine.schemas.models import ModelInfo


def describe(manager: ModelManager, model_id: str) -> ModelInfo:
    """What we know of a model without loading it (config.json when it is on this machine).

    A config that no model could have makes this model unavailable, with the reason, and so
    does a last load that failed (remembered until the model's files change); neither ever
    makes the list fail for the other models."""
    spec = manager.spec(model_id)
    reason = manager.unavailable_reason(model_id)
    state = manager.state(model_id)
    if reason is None and state.state == "failed":
        reason = state.error
    loaded = manager.loaded_or_none(model_id)
    arch, refusal, known, seq2seq = None, None, False, None
    if loaded is not None:
        family, arch, refusal, known = loaded.family, loaded.arch, loaded.replay_refusal, True
        seq2seq = loaded.seq2seq is not None
    else:
        config, family = manager.peek_config(model_id)
        if config:
            seq2seq = bool(config.get("is_encoder_decoder", False))
        if config and family:
            try:
                arch = architecture_from_dict(config)
                refusal, known = replay_refusal_of(config), True
            except ValueError as err:
                reason = reason or f"'{model_id}' cannot be used: {err}"
    limit = None
    if arch and family:
        limit = token_limit_of(
            arch, refusal is None, manager.placement.dtype_name, manager.token_limit
        )
    return ModelInfo(
        id=spec.id,
        family=family.value if family else None,
        causal=loaded.causal if loaded else (family.causal if family else None),
        replay=(refusal is None) if known else None,
        replay_refusal=refusal,
        predicts=None if loaded is None else predicts_of(loaded),
        num_layers=arch.num_layers if arch else None,
        num_heads=arch.num_heads if arch else None,
        num_kv_heads=arch.num_kv_heads if arch else None,
        head_dim=arch.head_dim if arch else None,
        encoder_decoder=seq2seq,
        rotary=arch.rotary if arch else None,
        max_tokens=limit,
        full_map_tokens=None if limit is None else min(limit, FULL_MAPS_MAX_TOKENS),
        available=reason is None,
        unavailable_reason=reason,
        loaded=loaded is not None,
        embedded=spec.source in (Source.MINILM_PACKAGE, Source.SMOLLM2_PACKAGE),
        description=spec.description,
    )
