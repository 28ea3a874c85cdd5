"""Query-key space of a real head (POST /api/attention/qkspace): its queries and keys, replayed
from the weights, normalised as AttentionViz does and projected together into 2-D."""

from __future__ import annotations

import torch

from app.errors import InvalidInput, RequestCancelled
from app.inference.cache import ForwardCache
from app.inference.forward import ForwardResult
from app.inference.inflight import AnswerBudget
from app.inference.replay import layer_inputs
from app.models.loader import LoadedModel
from app.models.manager import ModelManager
from app.schemas.qkspace import HeadSpace, QKSpaceRequest, QKSpaceResponse
from app.serialize import to_lists
from app.services.attention import ShouldStop, check_layer_head, held_forward
from attention_core import project_qk, qk_space
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
    manager: ModelManager,
    cache: ForwardCache,
    budget: AnswerBudget,
    req: QKSpaceRequest,
    should_stop: ShouldStop = None,
) -> QKSpaceResponse:
    """One head, or every head of the layer: queries and keys in one plane, with each query's
    strongest keys read from the model's own attention output."""
    loaded = manager.get(req.model)
    check_layer_head(loaded, req.layer, req.head or 0)
    check_method(req.method)
    with held_forward(loaded, cache, budget, req, should_stop) as result:
        return qkspace_of(loaded, result, req, should_stop)


def qkspace_of(
    loaded: LoadedModel, result: ForwardResult, req: QKSpaceRequest, should_stop: ShouldStop = None
) -> QKSpaceResponse:
    """Query-key space of a forward pass's layer (also the notebook widget's, which passes its
    own run as `loaded` and `result`)."""
    check_method(req.method)
    if req.method == "umap" and result.seq_len < 2:
        raise InvalidInput("UMAP needs at least 2 tokens (4 points); use method 'pca'")
    inputs = layer_inputs(
        loaded.model, loaded.family, loaded.causal, result.hidden_inputs, req.layer
    )
    with torch.inference_mode():
        q, k = project_qk(inputs.hidden, inputs.proj, inputs.rope)  # (1, H|Hkv, T, hd)
    q, k = q[0].to("cpu"), k[0].to("cpu")
    group = inputs.proj.n_heads // inputs.proj.n_kv_heads
    heads = list(range(inputs.proj.n_heads)) if req.head is None else [req.head]
    strongest = min(req.strongest, result.seq_len)
    maps = result.layer_maps(req.layer, heads)  # (h, T, T)
    spaces = []
    for index, head in enumerate(heads):
        if should_stop is not None and should_stop():
            raise RequestCancelled("the client went away before the projections were done")
        space = qk_space(q[head], k[head // group], req.method)
        top = maps[index].topk(strongest, dim=-1)  # (T, strongest)
        spaces.append(
            HeadSpace(
                head=head,
                kv_head=head // group,
                queries=to_lists(space.queries),
                keys=to_lists(space.keys),
                explained=None if space.explained is None else list(space.explained),
                query_scale=space.query_scale,
                strongest=top.indices.tolist(),
                strongest_weights=to_lists(top.values),
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
