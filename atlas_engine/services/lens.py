"""The logit lens over a text (POST /api/attention/lens): one pass taken apart, every layer's
stream read through the final norm and the head."""

from __future__ import annotations

from dataclasses import dataclass

from atlas_engine import compute
from atlas_engine.errors import InvalidInput, RequestCancelled
from atlas_engine.inference.forward import count_tokens, tokenize_once
from atlas_engine.inference.inflight import Reservation
from atlas_engine.inference.lens import logit_lens
from atlas_engine.inference.predictions import top_predictions
from atlas_engine.inference.residual import layout_of, run_stream
from atlas_engine.inference.tokens import display_tokens
from atlas_engine.models.loader import LoadedModel
from atlas_engine.schemas.writes import MAX_LENS_CELLS, MAX_WRITES_TOKENS, LensRequest, LensResponse
from atlas_engine.serialize import in_order, json_bytes_bound
from atlas_engine.services.passes import Passes, ShouldStop
from atlas_engine.services.predictions import prediction_rows
from atlas_engine.services.writes import (
    answered,
    candidate_fields,
    check_lens,
    chosen,
    stream_bytes,
    token_id,
)


@dataclass(frozen=True)
class LensPlan:
    """A lens request checked and sized against its model, before any pass."""

    inputs: dict
    seq: int
    positions: list[int]
    chosen: int | None
    answer_bytes: int


def plan_lens(loaded: LoadedModel, req: LensRequest) -> LensPlan:
    """Every rule checked and the answer's bytes bounded, from the request and the text's
    tokens alone: 422 saying why where the model or the request cannot be read."""
    check_lens(loaded)
    if req.text_pair is not None:
        raise InvalidInput("the logit lens reads one text: leave out text_pair")
    seq = count_tokens(loaded, req.text, None, MAX_WRITES_TOKENS)
    inputs, _ = tokenize_once(loaded, req.text, None)  # the encoding count_tokens made
    positions = prediction_rows(loaded, inputs["input_ids"][0].tolist())
    if not positions:
        raise InvalidInput(
            f"'{loaded.id}' predicts only at its mask token ({loaded.tokenizer.mask_token}); "
            "put one in the text"
        )
    if req.positions is not None:
        wrong = sorted(set(req.positions) - set(positions))
        if wrong:
            has = (
                f"positions 0 to {positions[-1]}"
                if loaded.predicts == "next_token"
                else f"mask tokens at {positions}"
            )
            raise InvalidInput(f"positions {wrong} are not read: the text has {has}")
        positions = sorted(req.positions)
    rows = loaded.arch.num_layers + 1
    cells = rows * len(positions) * req.top_k
    if cells > MAX_LENS_CELLS:
        raise InvalidInput(
            f"this lens would hold {cells:,} candidates ({rows} rows × {len(positions)} "
            f"positions × top_k {req.top_k}); the limit is {MAX_LENS_CELLS:,}. Lower top_k or "
            "shorten the text."
        )
    chosen_id = token_id(loaded, req.token, "token") if req.token is not None else None
    numbers = cells + 2 * rows * len(positions)  # each candidate's probability; the two grids
    bound = json_bytes_bound(numbers, cells + seq + rows + 1)  # a label per candidate and token
    return LensPlan(inputs, seq, positions, chosen_id, bound)


def lens_fields(
    loaded: LoadedModel, plan: LensPlan, top_k: int, should_stop: ShouldStop = None
) -> dict:
    """The LensResponse's fields (float tensors where json_with_float32 writes them)."""
    stream = run_stream(loaded, plan.inputs)
    if should_stop is not None and should_stop():
        raise RequestCancelled()
    positions, chosen_id = plan.positions, plan.chosen
    if chosen_id is None:
        last = stream.last_hidden[0, positions[-1] : positions[-1] + 1]
        chosen_id = int(top_predictions(loaded.predictor, last, 1)[0][0, 0])
    step = compute.between_steps(should_stop, "the lens's rows")
    grid = logit_lens(loaded, stream, positions, top_k, chosen_id, step)
    del stream
    norm = layout_of(loaded).final_norm
    rows = loaded.arch.num_layers + 1
    fields = {
        "model": loaded.id,
        "tokens": display_tokens(loaded.tokenizer, plan.inputs["input_ids"][0].tolist())[0],
        "predicts": loaded.predicts,
        "positions": positions,
        "rows": ["embeddings", *(f"after layer {i}" for i in range(rows - 1))],
        "final_norm": type(norm).__name__ if norm is not None else None,
        "top_k": top_k,
        "top": [
            [candidate_fields(loaded.tokenizer, i, p) for i, p in zip(r_ids, r_probs, strict=True)]
            for r_ids, r_probs in zip(grid.ids.tolist(), grid.probs.numpy(), strict=True)
        ],
        "token": chosen(loaded, chosen_id).model_dump(),
        "token_probability": grid.chosen_prob,
        "token_rank": grid.chosen_rank.tolist(),
    }
    return in_order(fields, LensResponse)


def lens(
    passes: Passes, req: LensRequest, should_stop: ShouldStop = None
) -> tuple[bytes, Reservation]:
    """A LensResponse as JSON and its bytes' reservation (released once they are sent)."""
    loaded = passes.model(req.model)
    plan = plan_lens(loaded, req)
    return answered(
        passes, plan.answer_bytes, stream_bytes(loaded.arch, plan.seq),
        lambda: lens_fields(loaded, plan, req.top_k, should_stop),
    )  # fmt: skip
