"""Where a head's queries, keys and values came from (atlas_engine.inference.head_inputs),
against each piece replayed alone: the pieces of the last layer's input at every position
(score_trace.stream_pieces) put through the layer's attention one by one, their queries, keys
and values weighed by the head's attention as the module docstring defines. Pre-norm, post-norm,
GQA, a q/k norm and a softcap."""

from __future__ import annotations

import pytest
import torch

from atlas_engine.inference.head_inputs import head_inputs
from atlas_engine.inference.replay import layer_weights
from atlas_engine.inference.score_trace import (
    frozen_inner,
    stream_pieces,
    trace_layout,
    traced_pass,
)
from atlas_engine.models import capture
from tests.support.tiny import load_tiny

pytestmark = pytest.mark.slow

TEXT = " the cat sat on the mat because it was warm and then"
FAMILIES = ["llama", "gpt2", "gemma2", "qwen3", "bert", "distilbert"]


@pytest.fixture(scope="module", params=FAMILIES)
def loaded(request, tmp_path_factory):
    return load_tiny(request.param, tmp_path_factory.mktemp(request.param))


def one_by_one(loaded, layer):
    """[piece] -> (heads, 3): each piece's Q, K and V share, its q, k and v replayed alone."""
    layout = trace_layout(loaded)
    run = traced_pass(loaded, layout, TEXT, layer)
    seq = len(run.input_ids)
    found = stream_pieces(loaded, layout, run, layer, list(range(seq)))
    rows = torch.cat([found.pieces[:-1], torch.zeros_like(found.pieces[:1])]).float()
    with frozen_inner(loaded, layout, run, layer):
        real, _ = capture.capture_batch(run.call, run.hidden)
        _, replayed = capture.capture_batch(run.call, rows)
    q, k, v = (t.double() for t in replayed)
    q, k, v = q[:-1] - q[-1:], k[:-1] - k[-1:], v[:-1] - v[-1:]
    weights = layer_weights(real, None).double()
    shares = []
    for h in range(loaded.arch.num_heads):
        g = h // real.group
        a, qh, kh, vh = weights[h], real.q[h].double(), real.k[g].double(), real.v[g].double()
        o = a @ vh
        unit = o / (o * o).sum(-1, keepdim=True)
        shares.append(torch.stack([
            (a * (q[:, h] @ kh.T)).sum((-1, -2)) * real.scale / seq,
            (a * (qh @ k[:, g].transpose(-1, -2))).sum((-1, -2)) * real.scale / seq,
            ((a @ v[:, g]) * unit).sum((-1, -2)) / seq,
        ], dim=-1))  # fmt: skip
    return found.names, torch.stack(shares, 1).cpu()  # (pieces, heads, 3)


def test_each_pieces_share_is_its_own_query_key_and_value_weighed_by_the_head(loaded):
    layer = loaded.arch.num_layers - 1
    got = head_inputs(loaded, TEXT, [layer])
    names, want = one_by_one(loaded, layer)
    size = float(want.abs().max())
    for index, piece in enumerate(names[:-1]):
        if piece.kind == "head":
            mine = got.from_heads[:, 0, :, piece.layer, piece.head]
        elif piece.kind == "mlp":
            mine = got.from_mlps[:, 0, :, piece.layer]
        else:
            mine = got.from_embeddings[:, 0, :, got.embedding_labels.index(piece.label)]
        assert torch.allclose(mine.T, want[index], atol=1e-5 * size, rtol=0), piece
    # the value shares and the bias sum to one: each output projected on itself
    parts = got.from_heads.sum((-1, -2)) + got.from_mlps.sum(-1) + got.from_embeddings.sum(-1)
    assert torch.allclose((parts + got.bias)[2], torch.ones_like(got.bias[2]), atol=1e-5)
    assert torch.equal(got.totals[0], got.totals[1])  # Q and K take apart the same sum
