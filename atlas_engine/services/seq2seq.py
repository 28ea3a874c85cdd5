"""An encoder-decoder's decoder self-attention and cross-attention, one decoder layer at a time
(POST /api/attention/decoder): sized from the request, then one run of the whole model."""

from __future__ import annotations

from atlas_engine.errors import InvalidInput, RequestCancelled
from atlas_engine.inference.forward import count_tokens
from atlas_engine.inference.inflight import Reservation
from atlas_engine.inference.seq2seq import decoder_input, decoder_maps, decoder_shape, held_bytes
from atlas_engine.schemas.attention import MAX_JSON_WEIGHTS
from atlas_engine.schemas.seq2seq import DecoderRequest, DecoderResponse
from atlas_engine.serialize import in_order, json_bytes_bound, json_with_float32
from atlas_engine.services.checks import indices
from atlas_engine.services.passes import Passes, ShouldStop


def decoder_attention(
    passes: Passes, req: DecoderRequest, should_stop: ShouldStop = None
) -> tuple[bytes, Reservation]:
    """A DecoderResponse as JSON (its maps as float32) and its bytes' reservation, which the
    caller releases once they are sent. The model, the layer, both lengths, the answer's
    weights and what the pass holds are checked before the model runs."""
    loaded = passes.model(req.model)
    layers, heads = decoder_shape(loaded)
    indices([req.layer], layers, "decoder layer")
    limit = loaded.full_map_tokens
    seq = count_tokens(loaded, req.text, None, limit)
    target = decoder_input(loaded, req.target, limit)
    s = len(target)
    weights = heads * (s * s + s * seq)
    if weights > MAX_JSON_WEIGHTS:
        raise InvalidInput(
            f"this layer's maps hold {weights:,} weights ({seq} input and {s} target tokens); "
            f"a JSON answer holds at most {MAX_JSON_WEIGHTS:,}. Shorten the texts."
        )
    bound = json_bytes_bound(weights, seq + s, len(req.text) + len(req.target))
    with passes.answer(bound) as answer:
        held = passes.reserve_bytes("decoder", held_bytes(loaded, seq, s))
        try:
            if should_stop is not None and should_stop():
                raise RequestCancelled()
            maps = decoder_maps(loaded, req.text, target, req.layer)
        finally:
            held.release()
        fields = {
            "model": loaded.id,
            "tokens": maps.tokens,
            "target_tokens": maps.target_tokens,
            "target_special": maps.target_special,
            "layer": req.layer,
            "num_layers": layers,
            "num_heads": heads,
            "decoder": maps.decoder,
            "cross": maps.cross,
        }
        return json_with_float32(in_order(fields, DecoderResponse)), answer
