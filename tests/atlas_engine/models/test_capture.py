"""The capture path (atlas_engine.models.capture) on every architecture issue 39 names, made as
tiny random models from the table of tests/support/tiny.py: under the capture function a model
computes exactly what eager attention computes, and each layer replayed from its recorded call
gives, through attention_core.modern, exactly the weights and head outputs eager transformers
returns, bit for bit in float32, for both sequences of a padded batch (left padding for
decoders, right for encoders): softcapped scores (Gemma 2), sliding windows that differ by layer
(Mistral, Gemma 2/3, gpt-oss, ModernBERT), attention sinks (gpt-oss), T5's position bias
(encoder, decoder and cross-attention), GQA and MQA, q/k norms (Qwen3, OLMo-2, Gemma 3)."""

from __future__ import annotations

import pytest
import torch
import transformers as tf

from atlas_engine.inference.replay import layer_weights
from atlas_engine.models import capture
from attention_core.modern import head_output
from tests.support.tiny import DECODERS, ENCODER_DECODERS, ENCODERS, sized

pytestmark = pytest.mark.slow

V = 96  # vocabulary of every tiny model made here


def batch(causal: bool) -> dict[str, torch.Tensor]:
    """Two sequences of 7 tokens, the first with 3 of padding (left for a decoder)."""
    torch.manual_seed(1)
    ids = torch.randint(5, V, (2, 7))
    mask = torch.ones(2, 7, dtype=torch.long)
    if causal:
        mask[0, :3] = 0
    else:
        mask[0, 4:] = 0
    return {"input_ids": ids, "attention_mask": mask}


def model_of(config) -> torch.nn.Module:
    torch.manual_seed(0)
    with torch.device("cpu"):
        model = tf.AutoModel.from_config(config, attn_implementation="eager")
    return model.eval().requires_grad_(False)


def recorded_pass(model, inputs, modules, fused=False):
    """The model's output under the capture function, and each module's (hidden, call); with
    `fused`, as a long text's pass runs (PyTorch's fused kernel where no extra needs eager)."""
    recorder = capture.Recorder()
    recorder.fused = fused
    kept = []

    def hook(module, args, kwargs):
        kept.append(capture.record_call(recorder, module, args, kwargs))

    handles = [m.register_forward_pre_hook(hook, with_kwargs=True) for m in modules]
    try:
        with torch.inference_mode(), capture.recording(recorder):
            out = model(**inputs, output_attentions=True)
    finally:
        for handle in handles:
            handle.remove()
    return out, kept


def check_replays(kept, expected, outputs=None):
    """Every recorded layer replayed, for both sequences: weights equal to eager's."""
    assert len(kept) == len(expected)
    for index, ((hidden, call), eager) in enumerate(zip(kept, expected, strict=True)):
        for b in range(hidden.shape[0]):
            captured = capture.capture_layer(call, hidden, sequence=b)
            with torch.inference_mode():
                weights = layer_weights(captured)
            assert torch.equal(weights, eager[b]), (index, b, (weights - eager[b]).abs().max())
            if outputs is not None:  # each head's output, weights × its value head
                group = captured.group
                for h in range(captured.n_heads):
                    mixed = head_output(weights[h], captured.v[h // group])
                    assert torch.equal(mixed, outputs[index][b, :, h]), (index, b, h)


class _Outputs(capture.Recorder):
    """Keeps what each attention call returns (batch, T, heads, head_dim)."""

    def __init__(self):
        super().__init__()
        self.outputs = []

    def on_call(self, module, q, k, v, mask, kw):
        out, weights = super().on_call(module, q, k, v, mask, kw)
        self.outputs.append(out.clone())
        return out, weights


@pytest.mark.parametrize("name", [*ENCODERS, *DECODERS])
def test_every_layer_replays_as_eager_attention_computes_it(name):
    config = {**ENCODERS, **DECODERS}[name](V)
    model = model_of(config)
    inputs = batch(causal=name in DECODERS)
    if name == "distilbert":
        inputs = {k: v for k, v in inputs.items()}
    with torch.inference_mode():
        eager = model(**inputs, output_attentions=True)
    assert capture.config_refusal(model.config, type(model)) is None
    layers, refusal = capture.attach(model, inputs, config.num_hidden_layers)
    assert refusal is None and model.config._attn_implementation == capture.KEY
    with torch.inference_mode():
        plain = model(**inputs, output_attentions=True)  # no recorder: the eager function
    assert torch.equal(plain.last_hidden_state, eager.last_hidden_state)
    with capture.recording(_Outputs()) as heads, torch.inference_mode():
        model(**inputs)
    out, kept = recorded_pass(model, inputs, layers)
    assert torch.equal(out.last_hidden_state, eager.last_hidden_state)
    check_replays(kept, [a for a in eager.attentions], heads.outputs)
    # A long text's pass, as the server runs it: PyTorch's fused kernel (within 1e-5 of eager;
    # compared at real tokens: a padded query's row is its kernel's own, and the server's
    # passes have no padding), and the maps replayed from its own calls.
    fused, kept = recorded_pass(model, inputs, layers, fused=True)
    real = inputs["attention_mask"].bool()  # (2, T)
    torch.testing.assert_close(
        fused.last_hidden_state[real], eager.last_hidden_state[real], atol=1e-5, rtol=0
    )
    for (hidden, call), maps in zip(kept, eager.attentions, strict=True):
        for b in range(2):
            weights = layer_weights(capture.capture_layer(call, hidden, sequence=b))
            rows = real[b]
            torch.testing.assert_close(weights[:, rows], maps[b][:, rows], atol=1e-5, rtol=0)


def test_t5_encoder_decoder_and_cross_attention_replay_with_the_position_bias():
    config = ENCODER_DECODERS["t5"](V)
    model = model_of(config)
    inputs = batch(causal=False)
    decoder = {"decoder_input_ids": torch.randint(5, V, (2, 5)),
               "decoder_attention_mask": torch.tensor([[0, 0, 1, 1, 1], [1] * 5])}  # fmt: skip
    with torch.inference_mode():
        eager = model(**inputs, **decoder, output_attentions=True)
    model.set_attn_implementation(capture.KEY)
    modules = [m for m in model.modules() if isinstance(m, tf.models.t5.modeling_t5.T5Attention)]
    out, kept = recorded_pass(model, {**inputs, **decoder}, modules)
    assert torch.equal(out.last_hidden_state, eager.last_hidden_state)
    # calls in order: the encoder's layers, then each decoder layer's self- and cross-attention
    expected = [*eager.encoder_attentions]
    for self_maps, cross_maps in zip(eager.decoder_attentions, eager.cross_attentions, strict=True):
        expected += [self_maps, cross_maps]
    check_replays(kept, expected)
    bias = capture.capture_layer(kept[1][1], kept[1][0]).bias  # layer 1 gets layer 0's bias
    assert bias is not None and bias.shape == (4, 7, 7)


def test_modern_heads_match_their_familys_own_eager_function():
    """attention_core.modern against Gemma 2's softcap, gpt-oss's sinks and T5's bias, on one
    random head with a sliding-window mask, called directly."""
    from transformers.models.gemma2 import modeling_gemma2
    from transformers.models.gpt_oss import modeling_gpt_oss
    from transformers.models.t5 import modeling_t5

    from attention_core.modern import head_weights

    torch.manual_seed(0)
    q, k, v = (torch.randn(1, 1, 9, 8) for _ in range(3))
    allowed = torch.ones(9, 9, dtype=torch.bool).tril() & ~torch.ones(9, 9, dtype=torch.bool).tril(
        -4
    )
    additive = torch.zeros(9, 9).masked_fill(~allowed, torch.finfo(torch.float32).min)[None, None]
    module = torch.nn.Module()
    module.num_key_value_groups, module.head_dim, module.training = 1, 8, False
    module.sinks = torch.tensor([0.7])
    bias = torch.randn(1, 1, 9, 9)
    cases = {
        "softcap": (modeling_gemma2.eager_attention_forward, {"scaling": 0.3, "softcap": 2.0}),
        "sinks": (
            modeling_gpt_oss.eager_attention_forward,
            {"scaling": 0.3, "s_aux": module.sinks},
        ),
        "bias": (modeling_t5.eager_attention_forward, {"scaling": 1.0, "position_bias": bias}),
    }
    for name, (eager, kw) in cases.items():
        _, expected = eager(module, q, k, v, additive, **kw)
        got = head_weights(
            q[0, 0], k[0, 0], kw["scaling"], allowed, softcap=kw.get("softcap"),
            sink=module.sinks[0] if name == "sinks" else None,
            bias=bias[0, 0] if name == "bias" else None,
        )  # fmt: skip
        assert torch.equal(got, expected[0, 0]), name
        if name == "sinks":
            assert (got.sum(-1) < 1).all()  # the sink's share is left out, never renormalised


@pytest.mark.parametrize(
    ("config", "says"),
    [
        (lambda: tf.GPT2Config(n_embd=32, n_layer=2, n_head=4, reorder_and_upcast_attn=True),
         "reorder_and_upcast_attn"),
        (lambda: tf.DeepseekV3Config(hidden_size=32, num_hidden_layers=1, kv_lora_rank=8),
         "latent attention"),
        (lambda: tf.Qwen3NextConfig(hidden_size=32, num_hidden_layers=4), "linear-attention"),
        (lambda: tf.GPTNeoConfig(hidden_size=32, num_layers=2, num_heads=4,
                                 attention_types=[[["global", "local"], 1]]),
         "outside transformers' attention interface"),
    ],
)  # fmt: skip
def test_what_cannot_be_replayed_is_refused_by_name(config, says):
    made = config()
    model_class = tf.AutoModel._model_mapping[type(made)]
    assert says in capture.config_refusal(made, model_class)


def test_an_unknown_keyword_is_refused_by_name():
    model = model_of(tf.LlamaConfig(**sized(V)))
    inputs = batch(causal=True)
    layers, refusal = capture.attach(model, inputs, 2)
    assert refusal is None
    original = capture.unknown_keywords
    try:
        capture.unknown_keywords = lambda kw: ["mystery_bias"]
        model.set_attn_implementation("eager")
        layers, refusal = capture.attach(model, inputs, 2)
    finally:
        capture.unknown_keywords = original
    assert layers == [] and "mystery_bias" in refusal
    assert model.config._attn_implementation == "eager"


@pytest.mark.parametrize("name", ["mistral", "gemma2", "gpt-oss", "modernbert"])
def test_deep_zoom_reads_windows_softcaps_and_sinks_a_block_at_a_time(name):
    """What Deep zoom and the long-text statistics read (attention_core.tiles, from
    replay.replayed_qk): the model's own weights within the stated bound, on a text of 40
    tokens read in blocks of 8, so that sliding windows (3 keys), softcaps and sinks cross
    block edges."""
    from atlas_engine.inference.replay import replayed_qk
    from attention_core.tiles import overview, row_weights, weight_tile, window_logsumexp

    config = {**ENCODERS, **DECODERS}[name](V)
    model = model_of(config)
    torch.manual_seed(2)
    inputs = {"input_ids": torch.randint(5, V, (1, 40))}
    with torch.inference_mode():
        eager = model(**inputs, output_attentions=True).attentions
    layers, refusal = capture.attach(model, inputs, config.num_hidden_layers)
    assert refusal is None
    _, kept = recorded_pass(model, inputs, layers)
    hidden = torch.stack([h[0] for h, _ in kept])  # (L, T, D)
    calls = [call for _, call in kept]
    causal = name in DECODERS
    for layer in range(config.num_hidden_layers):
        heads = list(range(config.num_attention_heads))
        pair = replayed_qk(name, calls, hidden, layer, heads)
        how = {"causal": causal, "factor": pair.factor, "extras": pair.extras}
        want = eager[layer][0]  # (H, T, T)
        lse = window_logsumexp(pair.q, pair.k, (0, 40), block=8, **how)
        tile = weight_tile(pair.q, pair.k, lse, (0, 40), (0, 40), **how)
        torch.testing.assert_close(tile, want, atol=1e-6, rtol=0)
        rows = row_weights(pair.q, pair.k, (8, 24), **how)
        torch.testing.assert_close(rows, want[:, 8:24, : rows.shape[-1]], atol=1e-6, rtol=0)
        view = overview(pair.q, pair.k, lse, 4, block=8, **how)
        expected_max = torch.nn.functional.max_pool2d(want, 4, 4, ceil_mode=True)
        torch.testing.assert_close(view.maximum, expected_max, atol=1e-6, rtol=0)
    if name == "gpt-oss":
        assert (tile.sum(-1) < 1).all()  # the sinks' share, never renormalised


def test_a_mask_recipe_builds_any_block_as_that_slice_of_the_whole_mask():
    model = model_of(DECODERS["mistral"](V))
    inputs = {"input_ids": torch.randint(5, V, (1, 20))}
    layers, _ = capture.attach(model, inputs, 2)
    _, kept = recorded_pass(model, inputs, layers)
    recipe = next(v for v in kept[0][1].kwargs.values() if isinstance(v, capture.MaskRecipe))
    assert recipe.windowed and not recipe.plain
    whole = recipe.build()[0, 0] == 0  # (20, 20)
    for r0, r1, c0, c1 in [(0, 20, 0, 20), (5, 9, 2, 7), (12, 20, 0, 13), (19, 20, 16, 20)]:
        assert torch.equal(recipe.block(r0, r1, c0, c1), whole[r0:r1, c0:c1])
