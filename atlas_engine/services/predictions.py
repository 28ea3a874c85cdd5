"""What the model predicts, read from the top-k table its forward pass kept."""

from __future__ import annotations

from atlas_engine.errors import InvalidInput
from atlas_engine.inference.forward import ForwardResult
from atlas_engine.inference.tokens import display_tokens
from atlas_engine.models.lm_head import head_kind, no_head_reason
from atlas_engine.models.loader import LoadedModel
from atlas_engine.schemas.predictions import (
    Candidate,
    PositionPrediction,
    PredictionsRequest,
    PredictionsResponse,
)
from atlas_engine.services.passes import Passes, ShouldStop


def check_predicts(loaded: LoadedModel) -> None:
    """422 saying why, for a model whose checkpoint has no LM head (MiniLM, 'other' models)."""
    if loaded.predictor is None:
        raise InvalidInput(no_head_reason(loaded.id, head_kind(loaded.family, None)))


def prediction_rows(loaded: LoadedModel, token_ids: list[int]) -> list[int]:
    """The positions a model predicts at: every one for a decoder, the mask tokens for an
    encoder with a masked-LM head."""
    if loaded.predicts == "next_token":
        return list(range(len(token_ids)))
    return [i for i, t in enumerate(token_ids) if t == loaded.tokenizer.mask_token_id]


def candidates_of(tokenizer, ids: list[int], probs: list[float]) -> list[Candidate]:
    """Token ids and probabilities as labelled candidates, most likely first."""
    labels = display_tokens(tokenizer, ids)[0]
    return [
        Candidate(token_id=i, token=label, probability=min(p, 1.0))
        for i, label, p in zip(ids, labels, probs, strict=True)
    ]


def predicted_positions(
    loaded: LoadedModel, result: ForwardResult, top_k: int
) -> list[PositionPrediction]:
    """Every position of a decoder; the mask tokens of an encoder's text."""
    next_token = loaded.predicts == "next_token"
    rows = prediction_rows(loaded, result.token_ids)
    top_ids, top_probs = result.top_k(loaded.predictor)
    ids = top_ids[rows, :top_k].tolist()
    probs = top_probs[rows, :top_k].tolist()
    out = []
    for row, row_ids, row_probs in zip(rows, ids, probs, strict=True):
        following = result.token_ids[row + 1] if next_token and row + 1 < result.seq_len else None
        out.append(
            PositionPrediction(
                position=row,
                candidates=candidates_of(loaded.tokenizer, row_ids, row_probs),
                actual_rank=row_ids.index(following) if following in row_ids else None,
            )
        )
    return out


def predictions(
    passes: Passes,
    req: PredictionsRequest,
    should_stop: ShouldStop = None,
) -> PredictionsResponse:
    loaded = passes.model(req.model)
    check_predicts(loaded)
    with passes.held(loaded, req, should_stop) as result:
        positions = predicted_positions(loaded, result, req.top_k)
        tokens = result.tokens
    masked = loaded.predicts == "masked"
    return PredictionsResponse(
        model=loaded.id,
        tokens=tokens,
        kind=loaded.predicts,
        mask_token=loaded.tokenizer.mask_token if masked else None,
        top_k=req.top_k,
        positions=positions,
    )
