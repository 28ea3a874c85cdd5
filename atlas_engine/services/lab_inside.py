"""The course's first two lab pages on a real model: one layer's heads recomputed from their own
weights and checked against what the model computed, and one forward pass from the tokens to
the next token's probabilities."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import torch

from atlas_engine.errors import InvalidInput
from atlas_engine.inference.layer_lab import head_outputs, own_attention, projected
from atlas_engine.inference.probes import probe_bytes, stream_norms
from atlas_engine.inference.tokens import display_tokens
from atlas_engine.models.lm_head import head_kind, head_logits, no_head_reason
from atlas_engine.models.loader import LoadedModel
from atlas_engine.models.placement import model_device
from atlas_engine.schemas.lab_inside import (
    MAX_LAB_WIDTH,
    NEXT_TOKEN_TOP,
    SHOWN_DIMS,
    ForwardPassRequest,
    ForwardPassResponse,
    Guess,
    HeadAnatomyRequest,
    HeadAnatomyResponse,
)
from atlas_engine.serialize import to_lists
from atlas_engine.services.checks import check_layer_head
from atlas_engine.services.lab_models import lab_model, one_text, real_layer
from atlas_engine.services.passes import Passes


def _max_abs(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a - b.to(a.device)).abs().max())


def _narrow_enough(loaded: LoadedModel) -> None:
    arch = loaded.arch
    width = max(arch.d_model, arch.num_heads * arch.head_dim)
    if width > MAX_LAB_WIDTH:
        raise InvalidInput(
            f"'{loaded.id}' is {width} numbers wide; this lab page sends whole matrices of models "
            f"up to {MAX_LAB_WIDTH} wide. Pick a smaller model (MiniLM, SmolLM2)."
        )


@contextmanager
def _probe_room(passes: Passes, loaded: LoadedModel, seq: int) -> Iterator[None]:
    """The probe pass's bytes, reserved in the in-flight budget before it runs."""
    reservation = passes.reserve_bytes("probe", probe_bytes(loaded, seq))
    try:
        yield
    finally:
        reservation.release()


def head_anatomy(passes: Passes, req: HeadAnatomyRequest) -> HeadAnatomyResponse:
    """One real layer, head by head: X, each head's Q, K, V and A V, the heads' outputs joined
    and mixed by W_O, checked against the model's own output on a probe pass (W_O is found
    there: atlas_engine.inference.layer_lab.own_attention)."""
    loaded = lab_model(passes, req.model, [req.text], req.layer)
    check_layer_head(loaded, req.layer, req.head)
    _narrow_enough(loaded)
    with (
        real_layer(passes, loaded, req.text, req.layer) as lay,
        _probe_room(passes, loaded, lay.result.seq_len),
        torch.inference_mode(),
    ):
        captured = lay.captured
        weights = lay.weights()  # (H, T, T)
        outputs = head_outputs(captured, weights)  # (H, T, hd_v): each head's A_h V_h
        heads, seq, hd = outputs.shape
        joined = outputs.transpose(0, 1).reshape(seq, heads * hd)  # head h in columns h*hd...
        own = own_attention(loaded, req.text, req.layer)  # the model's, on a probe pass
        output = projected(joined, own)  # (T, D): as nn.Linear computes it
        group = captured.group
        kv_head = req.head // group
        own_joined = own.joined.to(joined.device)
        answer = HeadAnatomyResponse(
            model=loaded.id,
            tokens=lay.result.tokens,
            layer=req.layer,
            head=req.head,
            causal=loaded.causal,
            rope=lay.rotary,
            d_model=lay.hidden.shape[-1],
            num_heads=heads,
            num_kv_heads=heads // group,
            head_dim=hd,
            scale=captured.scale,
            kv_head_of=[h // group for h in range(heads)],
            qkv_bias=own.qkv_bias,
            output_bias=own.b_o is not None,
            x=to_lists(lay.hidden[0]),
            q=to_lists(captured.q[req.head]),
            k=to_lists(captured.k[kv_head]),
            v=to_lists(captured.v[kv_head]),
            head_output=to_lists(outputs[req.head]),
            weights=to_lists(weights),
            joined=to_lists(joined),
            output=to_lists(output),
            weights_max_abs_diff=[_max_abs(weights[h], own.weights[h]) for h in range(heads)],
            head_output_max_abs_diff=[
                _max_abs(joined[:, h * hd : (h + 1) * hd], own_joined[:, h * hd : (h + 1) * hd])
                for h in range(heads)
            ],
            output_max_abs_diff=_max_abs(output, own.output),
        )
    return answer


def _guesses(tokenizer, ids: list[int], probs: list[float], logits=None) -> list[Guess]:
    labels = display_tokens(tokenizer, ids)[0]
    logits = [None] * len(ids) if logits is None else logits
    return [
        Guess(token_id=i, token=label, probability=min(p, 1.0), logit=logit)
        for i, label, p, logit in zip(ids, labels, probs, logits, strict=True)
    ]


def forward_pass(passes: Passes, req: ForwardPassRequest) -> ForwardPassResponse:
    """Tokens, their embedding rows, the residual stream's size through every block with what
    attention and the MLP add, then (for a model with an LM head) the final norm and the next
    token's probabilities. The text's cached pass gives the tokens, the last hidden state and
    every position's top guess; a probe pass the norms the cache does not keep."""
    loaded = lab_model(passes, req.model, [req.text], 0)  # its blocks are read by the heads
    next_token = loaded.predictor is not None and loaded.predicts == "next_token"
    text = one_text(loaded, req.text)
    with passes.held(loaded, text, whole_maps=False) as result:  # reads no map
        seq = result.seq_len
        with _probe_room(passes, loaded, seq):
            norms = stream_norms(loaded, req.text)
        embedding = loaded.model.get_input_embeddings().weight  # (vocab, D)
        with torch.inference_mode():
            rows = embedding[result.token_ids].detach().to("cpu", torch.float32)  # (T, D)
        guesses, top, vocab = None, None, None
        if next_token:
            device = model_device(loaded.predictor)
            with torch.inference_mode():
                last = result.last_hidden[-1:].to(device)  # (1, D): after the final norm
                logits = head_logits(loaded.predictor, last)[0].double()  # (vocab,)
                best = logits.log_softmax(dim=-1).topk(NEXT_TOKEN_TOP)
            vocab = logits.shape[0]
            ids = best.indices.tolist()
            guesses = _guesses(
                loaded.tokenizer, ids, best.values.exp().tolist(), logits[ids].tolist()
            )
            top_ids, top_probs = result.top_k(loaded.predictor)  # (T, k), every position
            top = _guesses(loaded.tokenizer, top_ids[:, 0].tolist(), top_probs[:, 0].tolist())
        tokens, token_ids = result.tokens, result.token_ids
    return ForwardPassResponse(
        model=loaded.id,
        tokens=tokens,
        token_ids=token_ids,
        num_layers=loaded.arch.num_layers,
        d_model=loaded.arch.d_model,
        causal=loaded.causal,
        rotary=loaded.arch.rotary,
        renormalised=norms.renormalised,
        shown_dims=min(SHOWN_DIMS, rows.shape[1]),
        embeddings=to_lists(rows[:, :SHOWN_DIMS]),
        embedding_norms=to_lists(rows.norm(dim=-1)),
        entering_norms=to_lists(norms.entering),
        residual_norms=to_lists(norms.after_block),
        attention_norms=to_lists(norms.attention_added),
        mlp_norms=to_lists(norms.mlp_added),
        final_norms=None if norms.final is None else to_lists(norms.final),
        vocab_size=vocab,
        no_head=None if next_token else _why_no_next_token(loaded),
        next_token=guesses,
        top_guess=top,
    )


def _why_no_next_token(loaded: LoadedModel) -> str:
    if loaded.predictor is None:
        return no_head_reason(loaded.id, head_kind(loaded.family, None))
    return (
        f"'{loaded.id}' is an encoder: its head fills in masked tokens, it does not predict "
        "the next one. The pass ends at its last hidden state; SmolLM2 goes on to the next token."
    )
