"""A window of one layer's maps at a zoom level (POST /api/attention/tiles), computed from the
layer's replayed queries and keys block by block (attention_core.tiles): no tokens x tokens
matrix is built for it, whatever the window."""

from __future__ import annotations

import math

import torch

from atlas_engine import compute
from atlas_engine.errors import InvalidInput
from atlas_engine.inference.forward import count_tokens, pass_kernel
from atlas_engine.inference.inflight import Reservation
from atlas_engine.inference.replay import refused, replayed_qk
from atlas_engine.models.placement import FUSED_PASS_MAX_ABS_DIFF, REPLAY_MAX_ABS_DIFF
from atlas_engine.schemas.tiles import MAX_TILE_CELLS, TilesRequest, TilesResponse
from atlas_engine.serialize import in_order, json_bytes_bound, json_with_float32
from atlas_engine.services.checks import check_layer_head, indices
from atlas_engine.services.passes import Passes, ShouldStop
from attention_core.tiles import overview, weight_tile, window_logsumexp


def _window(span: list[int] | None, seq: int, name: str) -> tuple[int, int]:
    start, stop = span or (0, seq)
    if start >= stop:
        raise InvalidInput(f"{name} must be [start, stop) with start < stop; got {span}")
    if stop > seq:
        raise InvalidInput(f"{name} stop {stop} is past the text's {seq} tokens")
    return start, stop


def tiles(
    passes: Passes,
    req: TilesRequest,
    should_stop: ShouldStop = None,
) -> tuple[bytes, Reservation]:
    """The answer, TilesResponse as JSON (written here, on the compute lane, its weights as
    float32 numbers: json_with_float32), and its bytes' reservation, which the caller releases
    once they are sent. Sized from the request first: the window against the token count, the
    answer's cells against MAX_TILE_CELLS, its bytes against the in-flight budget; then one
    replay of the layer's q and k."""
    loaded = passes.model(req.model)
    if not loaded.maps_replayed:
        raise refused(
            loaded.id, loaded.replay_refusal or "it keeps its maps whole (half precision)"
        )
    check_layer_head(loaded, req.layer, 0)
    heads = indices(req.heads, loaded.arch.num_heads, "heads")
    seq = count_tokens(loaded, req.text, req.text_pair)  # the model's whole limit
    rows, cols = _window(req.rows, seq, "rows"), _window(req.cols, seq, "cols")
    out_rows = math.ceil((rows[1] - rows[0]) / req.cell)
    out_cols = math.ceil((cols[1] - cols[0]) / req.cell)
    cells = len(heads) * out_rows * out_cols
    if cells > MAX_TILE_CELLS:
        raise InvalidInput(
            f"this window holds {cells:,} values ({len(heads)} heads x {out_rows} x {out_cols}); "
            f"one answer holds at most {MAX_TILE_CELLS:,}. Ask for fewer heads, a smaller "
            "window or a larger cell."
        )
    bound = json_bytes_bound(cells, out_rows + out_cols)
    with passes.answer(bound) as reservation:
        with passes.held(loaded, req, should_stop, whole_maps=False) as result:
            pair = replayed_qk(loaded.id, result.calls, result.hidden_inputs, req.layer, heads)
            q, k, factor = pair.q, pair.k, pair.factor  # (h, T, hd) each
            how = {"causal": loaded.causal, "factor": factor, "extras": pair.extras}
            between_tiles = compute.between_steps(should_stop, "the window's tiles")
            with torch.inference_mode():
                lse = q.new_full(q.shape[:-1], float("nan"))  # (h, T): only the window's rows
                lse[:, rows[0] : rows[1]] = window_logsumexp(
                    q, k, rows, between_tiles=between_tiles, **how
                )
                if req.cell == 1:
                    values = weight_tile(q, k, lse, rows, cols, **how)
                else:
                    view = overview(
                        q, k, lse, req.cell, rows=rows, cols=cols, between_tiles=between_tiles,
                        **how,
                    )  # fmt: skip
                    values = view.maximum if req.reduce == "max" else view.mean
            tokens = result.tokens
        answer = in_order(
            {
                "model": loaded.id,
                "layer": req.layer,
                "heads": heads,
                "seq_len": seq,
                "rows": list(rows),
                "cols": list(cols),
                "cell": req.cell,
                "reduce": req.reduce,
                "row_tokens": tokens[rows[0] : rows[1] : req.cell],
                "col_tokens": tokens[cols[0] : cols[1] : req.cell],
                "values": values,  # (heads, row blocks, col blocks)
                "error_bound": error_bound(loaded, seq, passes.manager.placement.dtype_name),
            },
            TilesResponse,
        )
        return json_with_float32(answer), reservation


def error_bound(loaded, seq: int, dtype: str) -> float:
    """|value - transformers' own eager weight| at most this: the replay's bound, or where the
    pass over `seq` tokens ran the fused kernel, the larger drift of that pass from an eager
    one (placement.FUSED_PASS_MAX_ABS_DIFF)."""
    bound = REPLAY_MAX_ABS_DIFF[dtype]
    if pass_kernel(loaded, seq) == "sdpa":
        return max(bound, FUSED_PASS_MAX_ABS_DIFF)
    return bound
