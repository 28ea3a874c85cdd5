"""The lab pages that take a real model's layer apart (K/V heads pooled, RoPE off, one text's
queries on another's keys, sparse patterns) and the padded batch, from the layer's captured
call in the text's pass (atlas_engine.inference.layer_lab)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import torch
from torch import Tensor

import attention_core as ac
from atlas_engine.errors import InvalidInput
from atlas_engine.inference.batch import run_padded_batch
from atlas_engine.inference.forward import count_tokens
from atlas_engine.inference.layer_lab import LabLayer, cross, lab_layer, pooled, unrotated
from atlas_engine.inference.replay import layer_weights, refused
from atlas_engine.models.loader import LoadedModel
from atlas_engine.schemas.attention import TextRequest
from atlas_engine.schemas.lab_models import (
    MAX_LAB_REAL_TOKENS,
    CrossRequest,
    CrossResponse,
    KvSharingRequest,
    KvSharingResponse,
    PaddedSentence,
    PaddingRequest,
    PaddingResponse,
    RopeHeadRequest,
    RopeHeadResponse,
    SparsePattern,
    SparseRequest,
    SparseResponse,
)
from atlas_engine.serialize import to_bool_lists, to_lists
from atlas_engine.services.checks import check_layer_head, indices
from atlas_engine.services.passes import Passes
from attention_core.analysis import total_variation
from attention_core.cost import sharing_options


def lab_model(
    passes: Passes, model: str, texts: list[str], layer: int, heads: bool = True
) -> LoadedModel:
    """The model, with the layer and every text's token count checked before any forward;
    `heads`: the page replays the layer's heads, so a model whose heads do not replay is
    refused by name first."""
    loaded = passes.model(model)
    if heads and not loaded.replayable:
        raise refused(loaded.id, loaded.replay_refusal)
    indices([layer], loaded.arch.num_layers, "layer")
    for text in texts:
        n = count_tokens(loaded, text, None)
        if n > MAX_LAB_REAL_TOKENS:
            raise InvalidInput(
                f"the text is {n} tokens long; the lab pages take at most {MAX_LAB_REAL_TOKENS} "
                "tokens (the explorer takes long texts). Shorten it."
            )
    return loaded


def one_text(loaded: LoadedModel, text: str) -> TextRequest:
    """The forward cache's key for one sentence (already validated by the lab's schema)."""
    return TextRequest.model_construct(model=loaded.id, text=text, text_pair=None)


@contextmanager
def real_layer(passes: Passes, loaded: LoadedModel, text: str, layer: int) -> Iterator[LabLayer]:
    """`with real_layer(...) as lay:` one layer of the text's cached forward pass as its
    attention function received it (atlas_engine.inference.layer_lab); the pass stays reserved
    in the in-flight budget while the block runs (the model checked by lab_model)."""
    with passes.held(loaded, one_text(loaded, text)) as result:
        yield lab_layer(loaded, result, layer)


def kv_sharing(passes: Passes, req: KvSharingRequest) -> KvSharingResponse:
    """One layer with its own K/V heads, and with them mean-pooled into fewer (GQA / MQA)."""
    loaded = lab_model(passes, req.model, [req.text], req.layer)
    own_kv = loaded.arch.num_kv_heads
    options = list(sharing_options(own_kv))
    if req.kv_heads not in options:
        raise InvalidInput(
            f"{req.kv_heads} K/V heads cannot be pooled from this model's {own_kv}: pooling "
            f"averages whole groups, so pick one of {options}"
        )
    with real_layer(passes, loaded, req.text, req.layer) as lay, torch.inference_mode():
        own = lay.weights()  # (H, T, T)
        shared = layer_weights(pooled(lay.captured, req.kv_heads))
        model_maps = lay.model_maps()
        tokens = lay.result.tokens
    heads = loaded.arch.num_heads
    return KvSharingResponse(
        model=loaded.id,
        tokens=tokens,
        layer=req.layer,
        num_heads=heads,
        model_kv_heads=own_kv,
        kv_heads=req.kv_heads,
        options=options,
        group_of=[h // (heads // own_kv) for h in range(heads)],
        pooled_group_of=[h // (heads // req.kv_heads) for h in range(heads)],
        weights=to_lists(own),
        pooled_weights=to_lists(shared),
        moved=to_lists(total_variation(own, shared).mean(dim=-1)),
        replay_max_abs_diff=float((own - model_maps).abs().max()),
    )


def _encoder_only(loaded: LoadedModel, why: str) -> None:
    if loaded.causal:
        raise InvalidInput(f"'{loaded.id}' is a causal decoder; {why} Pick an encoder (MiniLM).")


def cross_attention(passes: Passes, req: CrossRequest) -> CrossResponse:
    """Queries from sentence A, keys and values from sentence B, through one layer's own
    projections: (heads, len_a, len_b) maps."""
    loaded = lab_model(passes, req.model, [req.text_a, req.text_b], req.layer)
    _encoder_only(
        loaded,
        "its layers mask the future and rotate by position, which has no meaning across two "
        "sentences.",
    )
    with (
        real_layer(passes, loaded, req.text_a, req.layer) as a,
        real_layer(passes, loaded, req.text_b, req.layer) as b,
        torch.inference_mode(),
    ):
        weights, norms = cross(a.captured, b.captured, a.rotary)  # A's q; B's k and v
        tokens_a, tokens_b = a.result.tokens, b.result.tokens
    return CrossResponse(
        model=loaded.id,
        layer=req.layer,
        tokens_a=tokens_a,
        tokens_b=tokens_b,
        weights=to_lists(weights),
        output_norms=to_lists(norms),
    )


def _sparse_patterns(
    req: SparseRequest, n: int, device: torch.device
) -> list[tuple[str, str, Tensor]]:
    outside = [g for g in req.global_tokens if g >= n]
    if outside:
        raise InvalidInput(f"global_tokens {outside[:5]} out of range: the text has {n} tokens")
    spec = dict(
        window=req.window, dilation=req.dilation, global_tokens=tuple(req.global_tokens),
        num_random=req.num_random, seed=req.seed, block_size=req.block_size,
    )  # fmt: skip
    shown = (
        ("sliding_window", f"Sliding window ±{req.window} (Longformer)"),
        ("sliding_window_causal", f"Causal window, {req.window} back (Mistral)"),
        ("dilated", f"Dilated ±{req.window}, every {req.dilation}"),
        ("global", f"Global tokens {list(req.global_tokens)}"),
        ("random", f"Random, {min(req.num_random, n)} a row (seed {req.seed})"),
        ("bigbird", "BigBird: window + global + random"),
        ("block_sparse", f"Block-sparse, blocks of {req.block_size}"),
    )
    return [
        (kind, label, ac.build_mask(ac.MaskSpec(kind=kind, **spec), n, device=device))
        for kind, label in shown
    ]


def sparse_weights(passes: Passes, req: SparseRequest) -> SparseResponse:
    """A real head's q, k, v under each sparse pattern: renormalised weights, the mass each
    pattern drops against full attention, the pairs scored and how far the output moves."""
    loaded = lab_model(passes, req.model, [req.text], req.layer)
    check_layer_head(loaded, req.layer, req.head)
    with real_layer(passes, loaded, req.text, req.layer) as lay, torch.inference_mode():
        captured = lay.captured
        if not captured.plain:
            raise InvalidInput(
                f"layer {req.layer} caps its scores, adds a position bias or has sink logits: "
                "this page renormalises a plain softmax under each pattern. Pick another model."
            )
        kv_head = req.head // captured.group
        q, k, v = captured.q[req.head], captured.k[kv_head], captured.v[kv_head]  # (T, hd)
        full_w = lay.weights([req.head])[0]  # (T, T), under the layer's own mask
        full_out = full_w @ v
        n = q.shape[0]
        own_mask = captured.allowed()  # the layer's own (causal, sliding) or None
        own_mask = None if own_mask is None else own_mask.to(q.device)
        causal = loaded.causal
        full_pairs = n * n if own_mask is None else int(own_mask.sum())
        patterns = []
        for kind, label, mask in _sparse_patterns(req, n, q.device):
            allowed = mask if own_mask is None else mask & own_mask
            trace = ac.sparse_attention(q, k, v, allowed, scale=captured.scale)
            dropped = 1 - (full_w * allowed).sum(dim=-1)  # (T,)
            change = (trace.output - full_out).abs().mean() / full_out.abs().mean()
            patterns.append(
                SparsePattern(
                    kind=kind,
                    label=label,
                    mask=to_bool_lists(allowed),
                    weights=to_lists(trace.weights),
                    pairs=int(allowed.sum()),
                    full_pairs=full_pairs,
                    dropped_mass=float(dropped.mean()),
                    dropped_per_row=to_lists(dropped.clamp(min=0)),
                    output_change=float(change),
                )
            )
        tokens = lay.result.tokens
    return SparseResponse(
        model=loaded.id,
        tokens=tokens,
        layer=req.layer,
        head=req.head,
        causal=causal,
        full_weights=to_lists(full_w),
        patterns=patterns,
    )


def _shares(w: Tensor) -> tuple[float, float]:
    """Mean weight on the previous token (rows 1..) and on the first token. w: (T, T)."""
    previous = torch.diagonal(w, offset=-1).mean() if w.shape[0] > 1 else torch.tensor(0.0)
    return float(previous), float(w[:, 0].mean())


def rope_head(passes: Passes, req: RopeHeadRequest) -> RopeHeadResponse:
    """A head replayed as it ran and again with its rotary embedding switched off (the layer's
    own module called with position embeddings that rotate by nothing)."""
    loaded = lab_model(passes, req.model, [req.text], req.layer)
    check_layer_head(loaded, req.layer, req.head)
    if not loaded.arch.rotary:
        raise InvalidInput(
            f"'{loaded.id}' has no rotary embedding: its positions are learned vectors added "
            "to the input (or a bias on the scores). Pick a model with RoPE (SmolLM2)."
        )
    with real_layer(passes, loaded, req.text, req.layer) as lay, torch.inference_mode():
        on = lay.weights([req.head])[0]
        off = layer_weights(unrotated(lay), [req.head])[0]
        diff = float((on - lay.model_maps()[req.head]).abs().max())
        tokens = lay.result.tokens
    (prev_on, first_on), (prev_off, first_off) = _shares(on), _shares(off)
    return RopeHeadResponse(
        model=loaded.id,
        tokens=tokens,
        layer=req.layer,
        head=req.head,
        with_rope=to_lists(on),
        without_rope=to_lists(off),
        replay_max_abs_diff=diff,
        previous_token_share=[prev_on, prev_off],
        first_token_share=[first_on, first_off],
    )


def padding(passes: Passes, req: PaddingRequest) -> PaddingResponse:
    """Sentences of different lengths in one padded batch: padded keys get weight 0, and each
    sentence's real rows equal a run of that sentence alone."""
    loaded = lab_model(passes, req.model, req.sentences, req.layer, heads=False)
    check_layer_head(loaded, req.layer, req.head)
    _encoder_only(loaded, "this page pads a batch for an encoder's key-padding mask.")
    batch = run_padded_batch(loaded, req.sentences, req.layer)
    maps = batch.layer_maps[:, req.head]  # (B, T, T)
    sentences = []
    for i, text in enumerate(req.sentences):
        real = int(batch.attention_mask[i].sum())
        w = maps[i]
        with passes.held(loaded, one_text(loaded, text)) as alone:
            own = alone.head_map(req.layer, req.head)  # (real, real)
            diff = float((w[:real, :real] - own).abs().max())
        sentences.append(
            PaddedSentence(
                tokens=batch.tokens[i],
                length=real,
                weights=to_lists(w),
                max_weight_on_padding=float(w[:, real:].max()) if real < w.shape[1] else 0.0,
                alone_max_abs_diff=diff,
            )
        )
    return PaddingResponse(
        model=loaded.id,
        layer=req.layer,
        head=req.head,
        seq_len=maps.shape[-1],
        attention_mask=batch.attention_mask.tolist(),
        sentences=sentences,
    )
