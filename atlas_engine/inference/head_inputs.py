"""Where a head's queries, keys and values came from on one text: for a later head, the share
of its attention-weighted scores and of its output that each earlier piece of the residual
stream (an earlier head, an MLP, the embeddings) wrote. The trace of one score
(atlas_engine.inference.score_trace) summed over every query and key, weighted by the head's
own attention.

For head v of layer l, with weights α (T, T), scale s, query q_i, key k_j, value v_j and output
o_i = Σ_j α_ij v_j:

  Q = (1/T) Σ_ij α_ij · s q_i·k_j   taken apart through the query (k_j held whole)
  K = the same sum taken apart through the key (q_i held whole)
  V = (1/T) Σ_i o_i·o_i / |o_i|² = 1, taken apart through the values: each piece's share of the
      head's output, projected on the output itself (the shares sum to 1)

With every norm's scale frozen at its value on the pass (the trace's convention), each sum is
linear in the pieces, so a piece's share is <piece, G>, G the sum's gradient with respect to
the layer's input (the other side held), carried back through the frozen norms to where the
piece was written. What no piece wrote (projection and norm biases) is the bias share: the
total less every piece's. One pass up to the layer and one replay of it with autograd, for
every head of the layer at once (the replay's backward is batched over the heads).

Shapes: T tokens, d the stream's width, H heads a layer, n the heads asked for.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor, nn

from atlas_engine.inference.replay import layer_weights
from atlas_engine.inference.score_trace import (
    Norm,
    TracedPass,
    TraceRefused,
    frozen_inner,
    frozen_linear,
    trace_layout,
    traced_pass,
)
from atlas_engine.models import capture
from atlas_engine.models.loader import LoadedModel


@dataclass(frozen=True)
class HeadInputs:
    """Shares of the asked heads' Q, K and V sums (module docstring), float64 on the host.
    Index 0 of each tensor is the kind (query, key, value); then the asked layer (in
    `layers`' order) and head (in `heads`' order)."""

    layers: list[int]
    heads: list[int]
    totals: Tensor  # (3, layers, n): Q and K in score units per query; V is 1
    from_heads: Tensor  # (3, layers, n, L, H): each earlier head's share; 0 from a layer >= l
    from_mlps: Tensor  # (3, layers, n, L)
    from_embeddings: Tensor  # (3, layers, n, E)
    embedding_labels: list[str]
    bias: Tensor  # (3, layers, n): what no piece wrote
    token_ids: list[int]


def linear_matrix(module: nn.Module, width: int) -> Tensor:
    """The matrix W (out, in) of a linear map module (nn.Linear, GPT-2's Conv1D, or any module
    that maps (..., width) linearly plus a bias), in float32 on its device."""
    weight = getattr(module, "weight", None)
    if isinstance(module, nn.Linear):
        return weight.detach().float()
    if type(module).__name__ == "Conv1D":
        return weight.detach().float().T
    basis = torch.eye(width + 1, width, dtype=weight.dtype, device=weight.device)
    with torch.no_grad():
        out = module(basis)
    return (out[:-1] - out[-1]).T.float()


def split_writes(projection: nn.Module, outs: Tensor) -> Tensor:
    """Each head's share of the output projection's output (bias left out): outs (T, H, hd),
    the heads' outputs -> (H, T, d) float64."""
    _, heads, hd = outs.shape
    matrix = linear_matrix(projection, heads * hd).double()  # (d, H·hd)
    return torch.einsum("thk,dhk->htd", outs.double(), matrix.view(-1, heads, hd))


def _adjoint(norm: Norm, io, g: Tensor) -> Tensor:
    """g (..., T, d) through the transpose of the norm's frozen linear part: the linear part is
    c -> center(c) · s ⊙ gamma, so its transpose is g -> center(gamma ⊙ g · s)."""
    x, y = io[id(norm[0])]
    s = norm[1].scale(x[0], y[0]).to(g.dtype)  # (T,)
    scaled = g * norm[1].gamma.to(g.dtype) * s.unsqueeze(-1)
    return scaled - scaled.mean(-1, keepdim=True) if norm[1].centers else scaled


def _gradients(loaded, layout, run: TracedPass, layer: int, heads: list[int]):
    """(G (3, n, T, d) float64: each asked head's Q, K and V sums' gradients with respect to
    the layer's input, in the stream's space (before its input norm); totals (3, n))."""
    call = run.calls[layer]
    hidden = run.hiddens[layer].detach().clone().requires_grad_(True)
    with frozen_inner(loaded, layout, run, layer):
        real, (q, k, v) = capture.capture_batch(call, hidden, grad=True)
    weights = layer_weights(real, heads).to(q.dtype)  # (n, T, T)
    group, scale = real.group, real.scale
    n, seq = len(heads), q.shape[2]
    outputs = {"q": torch.zeros(n, *q.shape, dtype=q.dtype, device=q.device),
               "k": torch.zeros(n, *k.shape, dtype=k.dtype, device=k.device),
               "v": torch.zeros(n, *v.shape, dtype=v.dtype, device=v.device)}  # fmt: skip
    totals = torch.zeros(3, n, dtype=torch.float64)
    with torch.no_grad():
        for i, h in enumerate(heads):
            a, qh, kh, vh = weights[i], q[0, h], k[0, h // group], v[0, h // group]
            outputs["q"][i, 0, h] = scale * a @ kh
            outputs["k"][i, 0, h // group] = scale * a.T @ qh
            o = a @ vh  # (T, hd)
            unit = o / (o * o).sum(-1, keepdim=True).clamp_min(1e-30)
            outputs["v"][i, 0, h // group] = a.T @ unit
            totals[0, i] = totals[1, i] = float((a * (qh @ kh.T)).sum() * scale) / seq
            totals[2, i] = float((o * unit).sum()) / seq
    grads = []
    for name, tensor in (("q", q), ("k", k), ("v", v)):
        (g,) = torch.autograd.grad(tensor, hidden, outputs[name], retain_graph=True,
                                   is_grads_batched=True)  # fmt: skip
        grads.append(g[:, 0].double() / seq)  # (n, T, d)
    g = torch.stack(grads)  # (3, n, T, d)
    norm_in = layout.roles[layer].norm_in
    return (_adjoint(norm_in, run.io, g) if norm_in is not None else g), totals


def _writes(layout, run: TracedPass, m: int) -> tuple[Tensor, Tensor]:
    """Block m's heads' writes (H, T, d) and its MLP's (T, d), float64, as the stream adds them
    (a pre-norm block) or as they enter N1 and N2 (a post-norm block)."""
    roles = layout.roles[m]
    writes = split_writes(roles.projection, run.outs[m][0])
    io = run.io
    if roles.kind == "sum":
        a = io[id(roles.projection)][1][0].double()
        w = a
        if roles.post is not None:
            writes = frozen_linear(roles.post, io, slice(None), writes)
            w = io[id(roles.post[0])][1][0].double()
        x, y = (t[0].double() for t in io[id(layout.blocks[m])])
        return writes, y - x - w
    z = io[id(roles.n2[0])][0][0].double()
    return writes, z - io[id(roles.n1[0])][1][0].double()


def head_inputs(
    loaded: LoadedModel, text: str, layers: list[int], heads: list[int] | None = None
) -> HeadInputs:
    """The asked heads' (every head by default) Q, K and V sums taken apart by the pieces that
    wrote them, for each layer in `layers` (module docstring)."""
    layout = trace_layout(loaded)
    if layout.refusal is not None:
        raise TraceRefused(layout.refusal)
    chosen = list(range(loaded.arch.num_heads)) if heads is None else heads
    run = traced_pass(loaded, layout, text, max(layers))
    n_layers, n_heads = loaded.arch.num_layers, loaded.arch.num_heads
    io = run.io
    shape = (3, len(layers), len(chosen))
    from_heads = torch.zeros(*shape, n_layers, n_heads, dtype=torch.float64)
    from_mlps = torch.zeros(*shape, n_layers, dtype=torch.float64)
    labels = [label for label, _ in layout.embeddings] or ["embeddings"]
    from_embeddings = torch.zeros(*shape, len(labels), dtype=torch.float64)
    totals = torch.zeros(shape, dtype=torch.float64)
    writes = {m: _writes(layout, run, m) for m in range(max(layers))}
    embeddings = _embedding_pieces(layout, run)  # (E, T, d)
    summed = all(roles.kind == "sum" for roles in layout.roles)
    if summed and writes:  # every piece meets the same G: one product a layer
        heads_all = torch.stack([writes[m][0] for m in range(max(layers))]).flatten(2)
        mlps_all = torch.stack([writes[m][1] for m in range(max(layers))]).flatten(1)
    for index, layer in enumerate(layers):
        g, totals[:, index] = _gradients(loaded, layout, run, layer, chosen)
        if summed and layer:
            flat = g.flatten(2).flatten(0, 1).T  # (T·d, 3n)
            shares = (heads_all[:layer].flatten(0, 1) @ flat).view(layer, n_heads, 3, -1)
            from_heads[:, index, :, :layer] = shares.permute(2, 3, 0, 1)
            from_mlps[:, index, :, :layer] = (
                (mlps_all[:layer] @ flat).view(layer, 3, -1).permute(1, 2, 0)
            )
        for m in reversed(range(0 if summed else layer)):
            roles = layout.roles[m]
            heads_w, mlp = writes[m]
            if roles.kind == "post":
                g_n2 = _adjoint(roles.n2, io, g)
                g = _adjoint(roles.n1, io, g_n2)  # the stream before block m, and a_m
                from_mlps[:, index, :, m] = torch.einsum("td,kntd->kn", mlp, g_n2)
            else:
                from_mlps[:, index, :, m] = torch.einsum("td,kntd->kn", mlp, g)
            from_heads[:, index, :, m] = torch.einsum("htd,kntd->knh", heads_w, g)
        from_embeddings[:, index] = torch.einsum("etd,kntd->kne", embeddings, g)
    parts = from_heads.sum((-1, -2)) + from_mlps.sum(-1) + from_embeddings.sum(-1)
    return HeadInputs(
        layers=layers,
        heads=chosen,
        totals=totals,
        from_heads=from_heads.cpu(),
        from_mlps=from_mlps.cpu(),
        from_embeddings=from_embeddings.cpu(),
        embedding_labels=labels,
        bias=(totals - parts.cpu()),
        token_ids=run.input_ids,
    )


def _embedding_pieces(layout, run: TracedPass) -> Tensor:
    """The embeddings' pieces of the first block's input, (E, T, d) float64."""
    if not layout.embeddings:
        return run.x0[0].double().unsqueeze(0)
    pieces = torch.stack([run.io[id(m)][1][0].double() for _, m in layout.embeddings])
    if layout.embedding_norm is not None:
        pieces = frozen_linear(layout.embedding_norm, run.io, slice(None), pieces)
    return pieces
