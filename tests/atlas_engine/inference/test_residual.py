"""The residual stream taken apart (atlas_engine.inference.residual), on tiny random checkpoints of every
decoder family the capture path replays: the direct attributions sum to the real logit, the
logit lens's last row is the model's own output, and exact patching equals patching by hand
with forward hooks on the model's own modules (no capture function involved)."""

from __future__ import annotations

import pytest
import torch
import transformers as tf

from atlas_engine.inference.attribution import attribute, head_sources
from atlas_engine.inference.forward import tokenize
from atlas_engine.inference.lens import logit_lens
from atlas_engine.inference.patching import Metric, exact_heads, exact_stream
from atlas_engine.inference.residual import layout_of, run_stream
from atlas_engine.models.loader import load_model
from atlas_engine.models.registry import parse_extra_model
from tests.conftest import CACHE_DIR
from tests.support.tiny import DECODERS, save_tiny

pytestmark = pytest.mark.slow

TEXT = " the cat sat on the mat and then"
CORRUPTED = " the dog sat on the mat and then"


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    root = tmp_path_factory.mktemp("residual")
    loaded = {}
    for name, config in DECODERS.items():
        torch.manual_seed(0)
        save_tiny(tf.AutoModelForCausalLM.from_config(config()), root / name)
        spec = parse_extra_model(f"local/{name}={root / name}")
        loaded[name] = load_model(
            spec, cache_dir=CACHE_DIR, token_limit=64, progress=lambda *a, **k: None
        )
    return loaded


def top_two(loaded, stream, position):
    logits = layout_of(loaded).unembed(stream.last_hidden[0, position])
    return logits.topk(2).indices.tolist()


@pytest.mark.parametrize("name", DECODERS)
def test_direct_attributions_sum_to_the_real_logit(models, name):
    loaded = models[name]
    assert layout_of(loaded).direct_refusal is None
    inputs, _ = tokenize(loaded, TEXT, None)
    last = inputs["input_ids"].shape[1] - 1
    stream = run_stream(loaded, inputs, weights_of=1)
    target, contrast = top_two(loaded, stream, last)
    for position in (0, last):
        for other in (None, contrast):
            found = attribute(loaded, stream, position, target, other)
            scale = max(1.0, abs(found.logit), float(found.heads.abs().max()))
            assert abs(found.total - found.logit) <= 2e-6 * scale, (name, found)
            assert found.heads.shape == (2, 4)
    # one head's contribution split by the key it read sums to its cell
    found = attribute(loaded, stream, last, target, None)
    split = head_sources(loaded, stream, 1, 2, last, target, None)
    assert float(split.sum()) == pytest.approx(float(found.heads[1, 2]), rel=1e-5, abs=1e-7)


@pytest.mark.parametrize("name", DECODERS)
def test_the_lens_last_row_is_the_models_own_output(models, name):
    loaded = models[name]
    inputs, _ = tokenize(loaded, TEXT, None)
    seq = inputs["input_ids"].shape[1]
    stream = run_stream(loaded, inputs)
    grid = logit_lens(loaded, stream, list(range(seq)), 3, chosen=7)
    with torch.inference_mode():
        own = loaded.predictor(**inputs).logits[0].double()  # the with-head model, as is
    probs = own.softmax(-1)
    assert grid.ids.shape == (3, seq, 3)  # embeddings and two layers
    assert torch.equal(grid.ids[-1], probs.topk(3).indices)
    torch.testing.assert_close(grid.probs[-1], probs.topk(3).values.float(), rtol=0, atol=1e-6)
    torch.testing.assert_close(grid.chosen_prob[-1], probs[:, 7].float(), rtol=0, atol=1e-6)
    assert torch.equal(grid.chosen_rank[-1], (own > own[:, 7:8]).sum(-1) + 1)


def by_hand(loaded, inputs, metric, layer, *, head=None, position=None, source=None):
    """The metric of the corrupted run with a head's output (the input columns of its output
    projection) or the stream after a block at a position replaced, by forward hooks on the
    model's own modules."""
    layout = layout_of(loaded)
    if head is not None:
        size = source.shape[-1]

        def pre(module, args):
            x = args[0].clone()
            x[..., head * size : (head + 1) * size] = source
            return (x, *args[1:])

        handle = layout.projections[layer].register_forward_pre_hook(pre)
    else:

        def post(module, args, output):
            y = (output[0] if isinstance(output, tuple) else output).clone()
            y[0, position] = source
            return (y, *output[1:]) if isinstance(output, tuple) else y

        handle = layout.blocks[layer].register_forward_hook(post)
    try:
        with torch.inference_mode():
            hidden = loaded.model(**inputs).last_hidden_state
    finally:
        handle.remove()
    logits = layout.unembed(hidden[0, metric.position])
    return float(logits[metric.target] - logits[metric.contrast])


@pytest.mark.parametrize("name", ["llama", "gemma2", "gpt-neox", "gpt2"])
def test_exact_patching_equals_patching_by_hand(models, name):
    loaded = models[name]
    clean_inputs, _ = tokenize(loaded, TEXT, None)
    corrupted, _ = tokenize(loaded, CORRUPTED, None)
    clean = run_stream(loaded, clean_inputs)
    last = clean_inputs["input_ids"].shape[1] - 1
    target, contrast = top_two(loaded, clean, last)
    metric = Metric(last, target, contrast)
    heads = exact_heads(loaded, corrupted, clean, metric, lambda: False, lambda *a: None)
    stream = exact_stream(loaded, corrupted, clean, metric, lambda: False, lambda *a: None)
    for layer in range(2):
        for h in range(4):
            source = clean.heads[layer][0, :, h]  # (T, head_dim)
            expected = by_hand(loaded, corrupted, metric, layer, head=h, source=source)
            assert float(heads[layer, h]) == pytest.approx(expected, rel=1e-5, abs=1e-5)
        for position in (1, last):
            source = clean.outputs[layer][0, position]
            expected = by_hand(loaded, corrupted, metric, layer, position=position, source=source)
            assert float(stream[layer, position]) == pytest.approx(expected, rel=1e-5, abs=1e-5)


def test_exact_patching_a_few_components_a_rerun_gives_the_same_grids(models, monkeypatch):
    """A layer's components are rerun in batches of at most BATCH_TOKENS tokens, with the step
    hook before each (issue 50: one batch of a layer's 64 positions was a 12-20 s step)."""
    from atlas_engine.inference import patching

    loaded = models["llama"]
    clean_inputs, _ = tokenize(loaded, TEXT, None)
    corrupted, _ = tokenize(loaded, CORRUPTED, None)
    clean = run_stream(loaded, clean_inputs)
    seq = clean_inputs["input_ids"].shape[1]
    metric = Metric(seq - 1, *top_two(loaded, clean, seq - 1))
    reruns = []

    def grids():
        between = lambda: reruns.append(1)  # noqa: E731
        heads = exact_heads(loaded, corrupted, clean, metric, between, lambda *a: None)
        stream = exact_stream(loaded, corrupted, clean, metric, between, lambda *a: None)
        return heads, stream

    whole = grids()
    layers, heads = whole[0].shape
    assert len(reruns) == 2 * layers  # a layer's heads, then its positions, in one batch each
    monkeypatch.setattr(patching, "BATCH_TOKENS", 3 * seq)  # three components a rerun
    reruns.clear()
    for one, other in zip(whole, grids(), strict=True):
        torch.testing.assert_close(one, other, rtol=1e-5, atol=1e-6)
    assert len(reruns) == layers * (-(-heads // 3) + -(-seq // 3))


def test_the_lens_normaliser_is_within_its_stated_bound_of_float64():
    from atlas_engine.inference.lens import logsumexp64

    torch.manual_seed(3)
    logits = torch.randn(64, 49152) * 8  # spread like real logits, some rows very peaked
    logits[:8, :5] += 40
    top = logits.max(dim=-1, keepdim=True).values
    exact = torch.logsumexp(logits.double(), dim=-1)
    # a relative error of the sum is an absolute error of its log
    assert float((logsumexp64(logits, top) - exact).abs().max()) < 1e-6
    odd = logits[:, :49151]  # a vocabulary not a multiple of the block: one float64 sum
    exact = torch.logsumexp(odd.double(), dim=-1)
    top = odd.max(dim=-1, keepdim=True).values
    assert float((logsumexp64(odd, top) - exact).abs().max()) < 1e-6


@pytest.mark.parametrize("name", ["llama", "gpt2"])
def test_exact_patchings_recorded_run_fits_what_it_reserves(models, name):
    """The corrupted run's block outputs, kept while every layer is rerun from them, are
    within services.patching.recorded_bytes, reserved before the run."""
    from atlas_engine.services.patching import recorded_bytes

    loaded = models[name]
    corrupted, _ = tokenize(loaded, CORRUPTED, None)
    returned: list = []
    run_stream(loaded, corrupted, keep=False, record=returned)
    parts = [p for out in returned for p in (out if isinstance(out, tuple) else (out,))]
    held = sum(p.numel() * p.element_size() for p in parts if isinstance(p, torch.Tensor))
    assert 0 < held <= recorded_bytes(loaded, corrupted["input_ids"].shape[1])
