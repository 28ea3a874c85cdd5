"""Two heads side by side (POST /api/attention/compare): from any layers of one run, the same
head on two inputs, or two models on one text. At most two forward passes, both cached."""

from __future__ import annotations

from contextlib import ExitStack

from atlas_engine.errors import InvalidInput
from atlas_engine.inference.forward import ForwardResult, count_tokens
from atlas_engine.inference.inflight import Reservation
from atlas_engine.schemas.attention import MAX_JSON_WEIGHTS
from atlas_engine.schemas.compare import CompareRequest, CompareResponse, SideMap
from atlas_engine.serialize import in_order, json_bytes_bound, json_with_float32
from atlas_engine.services.checks import check_layer_head
from atlas_engine.services.passes import Passes, ShouldStop
from attention_core import total_variation


def alignment_of(a: ForwardResult, b: ForwardResult, same_model: bool) -> tuple[bool, str, list]:
    """(aligned, the sentence saying so, the positions whose tokens differ)."""
    if a.seq_len != b.seq_len:
        return (
            False,
            f"The two sides have {a.seq_len} and {b.seq_len} tokens, so positions do not line "
            "up: no difference is drawn.",
            [],
        )
    differ = [i for i, (x, y) in enumerate(zip(a.token_ids, b.token_ids, strict=True)) if x != y]
    if same_model or not differ:
        what = (
            "the same tokens"
            if not differ
            else f"{a.seq_len} tokens each; {len(differ)} position(s) hold different tokens"
        )
        return True, f"Aligned: {what}.", differ
    if [*a.tokens] == [*b.tokens]:  # two vocabularies, the same pieces of text
        return True, "Aligned: the two tokenisers cut this text into the same pieces.", []
    return (
        False,
        f"The two models' tokenisers cut this text differently (first at position {differ[0]}), "
        "so positions do not line up: no difference is drawn.",
        [],
    )


def compare(
    passes: Passes,
    req: CompareRequest,
    should_stop: ShouldStop = None,
) -> tuple[bytes, Reservation]:
    """Both heads' maps and, where the tokens line up, b - a and each row's distance: a
    CompareResponse as JSON, its maps' numbers as float32 (json_with_float32), and its bytes'
    reservation (Passes.answer), which the caller releases once they are sent."""
    other = req.other
    loaded_a = passes.model(req.model)
    loaded_b = passes.model(other.model or req.model)
    check_layer_head(loaded_a, req.layer, req.head)
    check_layer_head(loaded_b, other.layer, other.head)
    text_b = other.text if other.text is not None else req.text
    pair_b = other.text_pair if other.text is not None else req.text_pair
    seq_a = count_tokens(loaded_a, req.text, req.text_pair)
    seq_b = count_tokens(loaded_b, text_b, pair_b)
    cells = seq_a**2 + 2 * seq_b**2  # both maps, and the difference at most
    if cells > MAX_JSON_WEIGHTS:
        raise InvalidInput(
            f"this comparison would hold {cells:,} weights as JSON ({seq_a} and {seq_b} "
            f"tokens); the limit is {MAX_JSON_WEIGHTS:,}. Compare shorter texts."
        )
    with ExitStack() as held:
        texts = len(req.text) + len(text_b)  # both sides' texts are in the answer
        bound = json_bytes_bound(cells + seq_a, seq_a + seq_b, texts)  # and rows' distances
        reservation = held.enter_context(passes.answer(bound))
        pass_a = passes.reserve(loaded_a, req.text, req.text_pair, should_stop)
        held.callback(pass_a.release)
        pass_b = passes.reserve(loaded_b, text_b, pair_b, should_stop)
        held.callback(pass_b.release)
        run_a, run_b = pass_a.result, pass_b.result
        map_a = run_a.head_map(req.layer, req.head)  # (T, T)
        map_b = run_b.head_map(other.layer, other.head)  # (T', T')
        aligned, sentence, differ = alignment_of(run_a, run_b, loaded_a is loaded_b)
        difference = rows = None
        if aligned:
            difference = map_b - map_a
            rows = total_variation(map_b, map_a)  # (T,)
        side_a = {
            "model": loaded_a.id,
            "text": req.text,
            "tokens": run_a.tokens,
            "layer": req.layer,
            "head": req.head,
            "weights": map_a,
        }
        side_b = {
            "model": loaded_b.id,
            "text": text_b,
            "tokens": run_b.tokens,
            "layer": other.layer,
            "head": other.head,
            "weights": map_b,
        }
        answer = {
            "a": in_order(side_a, SideMap),
            "b": in_order(side_b, SideMap),
            "aligned": aligned,
            "alignment": sentence,
            "differing_tokens": differ,
            "difference": difference,
            "row_distance": rows,
            "mean_row_distance": None if rows is None else float(rows.mean()),
            "max_abs_difference": None if difference is None else float(difference.abs().max()),
        }
        return json_with_float32(in_order(answer, CompareResponse)), reservation
