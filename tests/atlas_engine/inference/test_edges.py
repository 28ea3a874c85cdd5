"""Edge attribution patching (atlas_engine.inference.edges) against a central finite difference
of the edge itself: the corrupted run with one later head's query, key or value recomputed
from its layer's input moved by ±ε times one earlier head's clean - corrupted write (the
head's own q, k or v swapped in through the capture function), on tiny models in float64
(pre-norm; GQA; Gemma 2's softcap and post norms). The difference holds second-order terms
and, where a family's softmax runs in float32 (Llama's), its rounding over 2ε: within 2 % of
the layer's largest edge."""

from __future__ import annotations

import pytest
import torch

from atlas_engine.inference.edges import INPUTS, _graded, _known, _writes, edge_scores
from atlas_engine.inference.forward import tokenize
from atlas_engine.inference.patching import Metric
from atlas_engine.inference.residual import layout_of, run_stream
from atlas_engine.inference.score_trace import TraceRefused, trace_layout
from atlas_engine.models import capture
from tests.support.tiny import load_tiny

pytestmark = pytest.mark.slow

CLEAN = " the cat sat on the mat and then"
CORRUPTED = " the dog sat on the mat and then"
EPS = 1e-2


def tiny(name, folder, dtype=torch.float64):
    loaded = load_tiny(name, folder)
    loaded.model.to(dtype)
    if loaded.predictor is not None:
        loaded.predictor.to(dtype)
    return loaded


def metric_of(loaded, inputs, metric, recorder):
    with torch.no_grad(), capture.recording(recorder):
        out = loaded.model(**inputs)
    logits = layout_of(loaded).unembed(out.last_hidden_state[0, metric.position])
    return float(logits[metric.target] - logits[metric.contrast])


def finite_difference(loaded, metric, layer, earlier, upstream, downstream, kind):
    """d metric / d ε of the corrupted run with head `downstream`'s input `kind` computed from
    x_layer + ε · (head (earlier, upstream)'s clean - corrupted write), over the span."""
    layout = trace_layout(loaded)
    inputs, _ = tokenize(loaded, CORRUPTED, None)
    run = _graded(loaded, inputs, metric)
    clean = run_stream(loaded, tokenize(loaded, CLEAN, None)[0])
    delta = _writes(loaded, layout, clean.heads[earlier][0], run["io"], earlier) - _writes(
        loaded, layout, run["outs"][earlier][0].detach(), run["io"], earlier
    )
    x = run["streams"][layer].detach()
    norm = layout.roles[layer].norm_in
    index = INPUTS.index(kind)
    module = loaded.attention_layers[layer]
    values = []
    for eps in (EPS, -EPS):
        with torch.no_grad():
            moved = x + eps * delta[upstream].unsqueeze(0)
            _, replayed = capture.capture_batch(
                run["calls"][layer], norm[0](moved) if norm else moved
            )
        new = replayed[index]

        class Swap(capture.Recorder):
            def on_call(self, m, q, k, v, mask, kw, new=new):
                if m is module:
                    tensors = [q, k, v]
                    tensors[index] = tensors[index].clone()
                    tensors[index][:, downstream] = new[:, downstream]
                    q, k, v = tensors
                return super().on_call(m, q, k, v, mask, kw)

        values.append(metric_of(loaded, inputs, metric, Swap()))
    return (values[0] - values[1]) / (2 * EPS)


@pytest.mark.parametrize("name", ["llama", "gpt2", "gemma2"])
def test_each_edge_is_the_metrics_derivative_along_it(name, tmp_path):
    loaded = tiny(name, tmp_path)
    tokenizer = loaded.tokenizer
    ids = tokenizer(CLEAN)["input_ids"]
    metric = Metric(
        len(ids) - 1, tokenizer(" the")["input_ids"][0], tokenizer(" a")["input_ids"][0]
    )
    found = edge_scores(loaded, CLEAN, CORRUPTED, metric)
    span = found.clean - found.corrupted
    for kind in INPUTS:
        scores = found.scores[kind][1]  # layer 1's heads, from layer 0's
        size = float(scores.abs().max())
        for upstream, downstream in ((0, 0), (2, 1)):
            want = finite_difference(loaded, metric, 1, 0, upstream, downstream, kind) / span
            got = float(scores[0, upstream, downstream])
            assert abs(got - want) <= 2e-2 * size, (kind, upstream, downstream, got, want)


def test_a_post_norm_model_has_no_edges(tmp_path):
    loaded = tiny("bert", tmp_path, torch.float32)
    with pytest.raises(TraceRefused, match="renormalise"):
        edge_scores(loaded, CLEAN, CORRUPTED, Metric(1, 2, 3))


SUMMING = ["gpt2", "gpt-neox", "llama", "mistral", "qwen2", "qwen3", "phi3", "olmo2", "gemma2",
           "gemma3"]  # fmt: skip
"""The decoder families whose blocks add to the stream, in float64 (GPT-OSS's experts run in
float32 only; its attention is Llama's)."""


@pytest.mark.parametrize("name", SUMMING)
def test_the_split_through_each_heads_rows_is_autograds_whole_backward(name, tmp_path):
    """_through_heads' split (a head's columns of the q, k and v maps by hand, the input norm's
    gradient by its formula) against autograd's backward through the whole layer batched over
    the heads, on a batch of two as edge_scores runs it, in float64: fused maps (GPT-2,
    GPT-NeoX's interleaved heads, Phi-3), GQA and MQA, per-head q/k norms (Qwen 3, Gemma 3), a
    q norm over the whole projection (OLMo 2: its layers are done whole), Gemma's (1 + w);
    and both paths are taken where they should be."""
    loaded = tiny(name, tmp_path)
    tokenizer = loaded.tokenizer
    both = {key: torch.cat([value, tokenize(loaded, CORRUPTED, None)[0][key]])
            for key, value in tokenize(loaded, CLEAN, None)[0].items()}  # fmt: skip
    metric = Metric(len(tokenizer(CLEAN)["input_ids"]) - 1, 11, 13)
    split = _graded(loaded, both, metric, row=1)["through"]
    chose = _known[loaded.model]
    layers = range(1, len(loaded.attention_layers))
    assert all(bool(chose[i]["columns"]) == (name != "olmo2") for i in layers), name
    whole_known = {i: {"columns": False} for i in range(len(loaded.attention_layers))}
    _known[loaded.model] = whole_known
    whole = _graded(loaded, both, metric, row=1)["through"]
    del _known[loaded.model]
    for layer in range(1, len(split)):
        for p in INPUTS:
            size = float(whole[layer][p].abs().max())
            assert size > 0, (name, layer, p)
            # RMSNorm families compute the norm in float32 even in a float64 model, so
            # autograd's path holds float32 rounding (about 1e-7 of the largest) that the
            # formula, in float64, does not; LayerNorm's agree to 1e-12.
            torch.testing.assert_close(split[layer][p], whole[layer][p], rtol=0, atol=1e-6 * size)
