"""Heads switched off: the ablated run against the cached unablated one (two forward passes at
most: the unablated one is usually cached already)."""

from __future__ import annotations

from collections import defaultdict

import torch

from atlas_engine.inference.ablation import run_ablated
from atlas_engine.inference.forward import ForwardResult, count_tokens
from atlas_engine.inference.inflight import Reservation
from atlas_engine.inference.predictions import compare_predictions
from atlas_engine.inference.replay import refused
from atlas_engine.models.loader import LoadedModel, predicts_of
from atlas_engine.models.placement import model_device
from atlas_engine.schemas.ablation import AblatedPosition, AblationRequest, AblationResponse
from atlas_engine.serialize import in_order, json_bytes_bound, json_with_float32
from atlas_engine.services.checks import check_layer_head
from atlas_engine.services.passes import Passes, ShouldStop
from atlas_engine.services.predictions import candidates_of, prediction_rows
from attention_core.analysis import total_variation


def _checked_heads(loaded: LoadedModel, req: AblationRequest) -> dict[int, list[int]]:
    """{layer: [heads]} to switch off, every index checked against the model first."""
    if not loaded.replayable:
        raise refused(loaded.id, loaded.replay_refusal)
    by_layer: dict[int, list[int]] = defaultdict(list)
    for ref in req.heads:
        check_layer_head(loaded, ref.layer, ref.head)
        by_layer[ref.layer].append(ref.head)
    check_layer_head(loaded, req.layer, req.head)
    return dict(by_layer)


def _positions(
    loaded: LoadedModel, base: ForwardResult, ablated_hidden, top_k: int
) -> list[AblatedPosition]:
    if loaded.predictor is None:
        return []
    rows = prediction_rows(loaded, base.token_ids)  # a masked LM: only its mask tokens
    if not rows:
        return []
    device = model_device(loaded.predictor)
    shift = compare_predictions(
        loaded.predictor, base.last_hidden[rows].to(device), ablated_hidden[rows].to(device), top_k
    )
    out = []
    for i, row in enumerate(rows):  # i: the row's place among the predicted rows
        out.append(
            AblatedPosition(
                position=row,
                base=candidates_of(
                    loaded.tokenizer, shift.base_ids[i].tolist(), shift.base_probs[i].tolist()
                ),
                ablated=candidates_of(
                    loaded.tokenizer, shift.ids[i].tolist(), shift.probs[i].tolist()
                ),
                kl=float(shift.kl[i]),
                logit_change=float(shift.logit_change[i]),
            )
        )
    return out


def ablate(
    passes: Passes,
    req: AblationRequest,
    should_stop: ShouldStop = None,
) -> tuple[bytes, Reservation]:
    """An AblationResponse as JSON, its maps' numbers as float32 (json_with_float32), and its
    bytes' reservation (Passes.answer), which the caller releases once they are sent."""
    loaded = passes.model(req.model)
    heads = _checked_heads(loaded, req)
    seq = count_tokens(loaded, req.text, req.text_pair, loaded.full_map_tokens)
    key = (
        loaded.id,
        req.text,
        req.text_pair,
        req.mode,
        tuple((layer, tuple(hs)) for layer, hs in sorted(heads.items())),
    )
    arch = loaded.arch
    candidates = seq * 2 * req.top_k  # at most every position's, before and after
    numbers = 2 * seq * seq + arch.num_layers * arch.num_heads + 2 * candidates + 2 * seq
    with passes.answer(json_bytes_bound(numbers, seq + candidates)) as answer_bytes:
        with passes.held(loaded, req, should_stop) as base:
            reservation = passes.budget.reserve(
                key, ForwardResult.nbytes_for(loaded.arch, seq, replayed=False)
            )
            try:
                run = run_ablated(loaded, req.text, req.text_pair, heads, req.mode)
                change = torch.stack(  # (L, H), a layer at a time: one (H, T, T) difference held
                    [
                        total_variation(base.layer_maps(layer), a).mean(dim=-1)
                        for layer, a in enumerate(run.attentions)
                    ]
                )
                positions = _positions(loaded, base, run.last_hidden, req.top_k)
                weights = base.head_map(req.layer, req.head)  # (T, T)
                ablated_weights = run.attentions[req.layer, req.head]  # (T, T)
                tokens = base.tokens
            finally:
                reservation.release()
        answer = {
            "model": loaded.id,
            "tokens": tokens,
            "mode": req.mode,
            "ablated": [head.model_dump() for head in req.heads],
            "predicts": predicts_of(loaded),
            "positions": [position.model_dump(mode="json") for position in positions],
            "attention_change": change.round(decimals=6).tolist(),
            "layer": req.layer,
            "head": req.head,
            "weights": weights,
            "ablated_weights": ablated_weights,
        }
        return json_with_float32(in_order(answer, AblationResponse)), answer_bytes
