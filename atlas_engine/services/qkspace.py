"""Query-key space of a real head (POST /api/attention/qkspace): its queries and keys, replayed
from the weights, normalised as AttentionViz does and projected together into 2-D."""

from __future__ import annotations

import torch

from atlas_engine.errors import InvalidInput, RequestCancelled
from atlas_engine.inference.forward import ForwardResult
from atlas_engine.inference.replay import layer_capture, refused
from atlas_engine.models.loader import LoadedModel
from atlas_engine.schemas.qkspace import HeadSpace, QKSpaceRequest, QKSpaceResponse
from atlas_engine.serialize import to_lists
from atlas_engine.services.checks import check_layer_head
from atlas_engine.services.passes import Passes, ShouldStop
from attention_core import qk_space
from attention_core.qkspace import umap_available


def projection_methods() -> list[str]:
    """The methods this server can project with."""
    return ["pca", "umap"] if umap_available() else ["pca"]


def check_method(method: str) -> None:
    if method not in projection_methods():
        raise InvalidInput(
            "UMAP needs the optional umap-learn package, which is not installed here "
            "(pip install 'attention-atlas[umap]'); use method 'pca'"
        )


def query_key_space(
    passes: Passes,
    req: QKSpaceRequest,
    should_stop: ShouldStop = None,
) -> QKSpaceResponse:
    """One head, or every head of the layer: queries and keys in one plane, with each query's
    strongest keys read from the model's own attention output."""
    loaded = passes.model(req.model)
    check_layer_head(loaded, req.layer, req.head or 0)
    check_method(req.method)
    with passes.held(loaded, req, should_stop) as result:
        return qkspace_of(loaded, result, req, should_stop)


def qkspace_of(
    loaded: LoadedModel, result: ForwardResult, req: QKSpaceRequest, should_stop: ShouldStop = None
) -> QKSpaceResponse:
    """Query-key space of a forward pass's layer (also the notebook widget's, which passes its
    own run as `loaded` and `result`)."""
    check_method(req.method)
    if req.method == "umap" and result.seq_len < 2:
        raise InvalidInput("UMAP needs at least 2 tokens (4 points); use method 'pca'")
    if not loaded.replayable:
        raise refused(loaded.id, loaded.replay_refusal)
    captured = layer_capture(result.calls, result.hidden_inputs, req.layer)
    q = captured.q.to("cpu", torch.float32)  # (H, T, hd), after RoPE and any q norm
    k = captured.k.to("cpu", torch.float32)  # (Hkv, T, hd)
    group = captured.group
    heads = list(range(captured.n_heads)) if req.head is None else [req.head]
    strongest = min(req.strongest, result.seq_len)
    allowed = captured.allowed()  # (T, T): the layer's own mask; None where every key
    visible = (
        torch.full((result.seq_len,), strongest)
        if allowed is None
        else allowed.sum(-1).clamp(max=strongest)
    )  # (T,): how many keys each query lists
    maps = result.layer_maps(req.layer, heads)  # (h, T, T)
    spaces = []
    for index, head in enumerate(heads):
        if should_stop is not None and should_stop():
            raise RequestCancelled("the client went away before the projections were done")
        space = qk_space(q[head], k[head // group], req.method)
        weights = maps[index] if allowed is None else maps[index].masked_fill(~allowed, -1.0)
        top = weights.topk(strongest, dim=-1)  # (T, strongest); masked keys sort last
        keep = [int(n) for n in visible]  # a row lists only keys it may read
        spaces.append(
            HeadSpace(
                head=head,
                kv_head=head // group,
                queries=to_lists(space.queries),
                keys=to_lists(space.keys),
                explained=None if space.explained is None else list(space.explained),
                query_scale=space.query_scale,
                strongest=[row[:n] for row, n in zip(top.indices.tolist(), keep, strict=True)],
                strongest_weights=[
                    row[:n] for row, n in zip(to_lists(top.values), keep, strict=True)
                ],
            )
        )
    return QKSpaceResponse(
        model=loaded.id,
        tokens=result.tokens,
        special_tokens=result.special,
        causal=loaded.causal,
        layer=req.layer,
        method=req.method,
        heads=spaces,
    )
