"""The lab's pages that take a real head apart (what a head is, pooled K/V heads, RoPE off,
cross-attention, sparse patterns) on every architecture whose heads replay, made here as tiny
random checkpoints: each page's numbers against the model itself, hooked or edited here with
no app code in between."""

from __future__ import annotations

import copy

import pytest
import torch
import transformers as tf

from atlas_engine.errors import InvalidInput
from atlas_engine.inference.cache import ForwardCache
from atlas_engine.inference.inflight import AnswerBudget
from atlas_engine.inference.layer_lab import cross, lab_layer
from atlas_engine.models.manager import ModelManager
from atlas_engine.models.registry import build_registry
from atlas_engine.schemas.attention import TextRequest
from atlas_engine.schemas.lab_inside import ForwardPassRequest, HeadAnatomyRequest
from atlas_engine.schemas.lab_models import (
    CrossRequest,
    KvSharingRequest,
    RopeHeadRequest,
    SparseRequest,
)
from atlas_engine.services import lab_inside, lab_models
from atlas_engine.services.passes import Passes
from tests.conftest import CACHE_DIR
from tests.support.tiny import DECODERS, ENCODER_DECODERS, save_tiny
from tests.support.tiny import ENCODERS as PLAIN_ENCODERS

pytestmark = pytest.mark.slow

TEXT = " the cat sat on the mat because it was warm and then"
OTHER = " where is the dog"
ENCODERS = {**PLAIN_ENCODERS, **ENCODER_DECODERS}  # T5 too: its encoder's pages
# Each layer's output projection, named by hand: the reference the page's W_O is checked with.
PROJECTION = {
    "gpt2": lambda m, i: m.h[i].attn.c_proj,
    "gpt-neox": lambda m, i: m.layers[i].attention.dense,
    "bert": lambda m, i: m.encoder.layer[i].attention.output.dense,
    "roberta": lambda m, i: m.encoder.layer[i].attention.output.dense,
    "distilbert": lambda m, i: m.transformer.layer[i].attention.out_lin,
    "modernbert": lambda m, i: m.layers[i].attn.Wo,
    "t5": lambda m, i: m.block[i].layer[0].SelfAttention.o,
}
ROTARY = [
    "gpt-neox",
    "llama",
    "mistral",
    "qwen2",
    "qwen3",
    "phi3",
    "olmo2",
    "gemma2",
    "gemma3",
    "gpt-oss",
    "modernbert",
]


@pytest.fixture(scope="module")
def passes(tmp_path_factory) -> Passes:
    root = tmp_path_factory.mktemp("lab-any")
    extra = []
    for name, config in {**DECODERS, **ENCODERS}.items():
        torch.manual_seed(0)
        if name in DECODERS:
            model = tf.AutoModelForCausalLM.from_config(config())
        elif name == "t5":
            model = tf.T5ForConditionalGeneration(config())
        else:
            model = tf.AutoModel.from_config(config())
        save_tiny(model, root / name)
        extra.append(f"local/{name}={root / name}")
    manager = ModelManager(
        build_registry(extra, None), cache_dir=CACHE_DIR, token_limit=64, max_loaded=16
    )
    return Passes(manager, ForwardCache(32, 2**30), AnswerBudget(2**30, 1.0))


def own_run(loaded, text, module=None):
    """The model's own maps of every layer and, where `module` is given, its (input, output)."""
    kept = {}

    def hook(_module, args, output):
        kept["io"] = (args[0][0], output[0])

    enc = loaded.tokenizer(text, return_tensors="pt")
    handle = None if module is None else module.register_forward_hook(hook)
    try:
        with torch.no_grad():
            out = loaded.model(input_ids=enc["input_ids"], output_attentions=True)
    finally:
        if handle is not None:
            handle.remove()
    return [a[0] for a in out.attentions], kept.get("io")


def t(x) -> torch.Tensor:
    return torch.tensor(x, dtype=torch.float32)


@pytest.mark.parametrize("name", [*DECODERS, *ENCODERS])
def test_what_a_head_is_joins_the_heads_and_mixes_them_as_the_model_does(passes, name):
    loaded = passes.model(f"local/{name}")
    layer = 1
    body = lab_inside.head_anatomy(
        passes, HeadAnatomyRequest(model=loaded.id, text=TEXT, layer=layer, head=1)
    )
    find = PROJECTION.get(name, lambda m, i: m.layers[i].self_attn.o_proj)
    maps, (joined, output) = own_run(loaded, TEXT, find(loaded.model, layer))
    assert torch.allclose(t(body.joined), joined, atol=1e-5, rtol=0)
    assert torch.allclose(t(body.output), output, atol=1e-5, rtol=0)
    assert torch.equal(t(body.weights), maps[layer])  # the capture replays eager exactly
    hd = body.head_dim
    assert torch.equal(t(body.joined)[:, hd : 2 * hd], t(body.head_output))
    assert body.output_max_abs_diff < 1e-5 and max(body.weights_max_abs_diff) == 0.0
    assert body.rope is (name in ROTARY)
    assert body.num_kv_heads == (1 if name == "gemma3" else 2 if name in DECODERS
                                 and name not in ("gpt2", "gpt-neox") else 4)  # fmt: skip
    assert body.qkv_bias is (
        name in ("gpt2", "gpt-neox", "qwen2", "bert", "roberta", "distilbert", "gpt-oss")
    )


def test_pooled_kv_heads_are_the_model_with_each_groups_weights_averaged(passes):
    """Without a k norm, pooling the keys and values the layer computed is pooling W_K and W_V
    (and their biases): here the model itself, its K/V heads of a group set to their mean."""
    for name, own, to in (("llama", 2, 1), ("bert", 4, 2), ("gpt-oss", 2, 1)):
        loaded = passes.model(f"local/{name}")
        body = lab_models.kv_sharing(
            passes, KvSharingRequest(model=loaded.id, text=TEXT, layer=1, kv_heads=to)
        )
        assert body.replay_max_abs_diff == 0.0 and body.model_kv_heads == own
        edited = copy.deepcopy(loaded.model)
        attn = (
            edited.layers[1].self_attn if name != "bert" else edited.encoder.layer[1].attention.self
        )
        with torch.no_grad():
            for linear in (attn.k_proj, attn.v_proj) if name != "bert" else (attn.key, attn.value):
                for tensor in (linear.weight, linear.bias):
                    if tensor is None:
                        continue
                    heads = tensor.reshape(to, own // to, -1, *tensor.shape[1:])
                    tensor.copy_(heads.mean(1, keepdim=True).expand_as(heads).reshape(tensor.shape))
        enc = loaded.tokenizer(TEXT, return_tensors="pt")
        with torch.no_grad():
            maps = edited(input_ids=enc["input_ids"], output_attentions=True).attentions[1][0]
        assert torch.allclose(t(body.pooled_weights), maps, atol=1e-6, rtol=0), name
        assert max(body.moved) > 1e-3


def test_rope_off_is_the_head_with_its_rotation_left_out(passes):
    """Llama and Qwen3 (whose q/k norms come before RoPE), by hand from their weights."""
    for name in ("llama", "qwen3"):
        loaded = passes.model(f"local/{name}")
        body = lab_models.rope_head(
            passes, RopeHeadRequest(model=loaded.id, text=TEXT, layer=1, head=3)
        )
        maps, _ = own_run(loaded, TEXT)
        assert body.replay_max_abs_diff == 0.0 and torch.equal(t(body.with_rope), maps[1][3])
        result = passes.cache.held((loaded.id, TEXT, None))
        x = result.hidden_inputs[1]  # (T, D): what entered layer 1's attention
        attn = loaded.model.layers[1].self_attn
        hd = attn.head_dim
        q = (x @ attn.q_proj.weight.T).view(len(x), -1, hd)[:, 3]
        k = (x @ attn.k_proj.weight.T).view(len(x), -1, hd)[:, 3 // 2]
        if name == "qwen3":
            q, k = attn.q_norm(q), attn.k_norm(k)
        scores = (q @ k.T) * attn.scaling
        scores = scores.masked_fill(torch.ones_like(scores, dtype=torch.bool).triu(1), -torch.inf)
        assert torch.allclose(t(body.without_rope), scores.softmax(-1), atol=1e-6, rtol=0), name
        assert (t(body.without_rope) - t(body.with_rope)).abs().max() > 1e-3


@pytest.mark.parametrize("name", ROTARY)
def test_rope_off_works_on_every_rotary_model(passes, name):
    loaded = passes.model(f"local/{name}")
    assert loaded.arch.rotary
    body = lab_models.rope_head(passes, RopeHeadRequest(model=loaded.id, text=TEXT, layer=0))
    assert body.replay_max_abs_diff == 0.0
    off = t(body.without_rope)
    assert torch.allclose(off.sum(-1), torch.ones(len(off)), atol=1e-5) or name == "gpt-oss"
    assert not torch.equal(off, t(body.with_rope))


@pytest.mark.parametrize("name", ["gpt2", "bert", "distilbert", "t5"])
def test_rope_off_is_refused_where_positions_are_not_rotations(passes, name):
    loaded = passes.model(f"local/{name}")
    assert not loaded.arch.rotary
    with pytest.raises(InvalidInput, match="rotary"):
        lab_models.rope_head(passes, RopeHeadRequest(model=loaded.id, text=TEXT))


@pytest.mark.parametrize("name", ["bert", "distilbert"])
def test_cross_attention_of_a_sentence_with_itself_is_its_self_attention(passes, name):
    loaded = passes.model(f"local/{name}")
    layer = 1
    same = lab_models.cross_attention(
        passes, CrossRequest(model=loaded.id, text_a=TEXT, text_b=TEXT, layer=layer)
    )
    maps, _ = own_run(loaded, TEXT)
    assert torch.allclose(t(same.weights), maps[layer], atol=1e-6, rtol=0)
    other = lab_models.cross_attention(
        passes, CrossRequest(model=loaded.id, text_a=OTHER, text_b=TEXT, layer=layer)
    )
    assert t(other.weights).shape == (4, len(other.tokens_a), len(other.tokens_b))
    assert torch.allclose(t(other.weights).sum(-1), torch.ones(4, len(other.tokens_a)))


def test_cross_attention_refuses_decoders_a_position_bias_and_a_window(passes):
    refused = {
        "decoder": CrossRequest(model="local/gemma3", text_a=OTHER, text_b=TEXT),
        "position bias": CrossRequest(model="local/t5", text_a=OTHER, text_b=TEXT),
        "RoPE": CrossRequest(model="local/modernbert", text_a=OTHER, text_b=TEXT, layer=0),
    }
    for says, request in refused.items():
        with pytest.raises(InvalidInput, match=says):
            lab_models.cross_attention(passes, request)
    loaded = passes.model("local/modernbert")  # its layer 1 slides, whatever its positions
    with passes.held(loaded, TextRequest(model=loaded.id, text=TEXT)) as result:
        sliding = lab_layer(loaded, result, 1).captured
        with pytest.raises(InvalidInput, match="sliding-window"):
            cross(sliding, sliding, rotary=False)


@pytest.mark.parametrize("name", ["gemma3", "qwen3", "modernbert", "gpt-neox"])
def test_sparse_patterns_keep_within_the_layers_own_mask(passes, name):
    """Gemma 3's layer 0 slides over 3 keys: every pattern stays inside that window, and
    'full' counts the pairs the layer itself scores."""
    loaded = passes.model(f"local/{name}")
    body = lab_models.sparse_weights(
        passes, SparseRequest(model=loaded.id, text=TEXT, layer=0, head=1)
    )
    maps, _ = own_run(loaded, TEXT)
    full = maps[0][1]
    assert torch.equal(t(body.full_weights), full)
    allowed = full > 0
    for pattern in body.patterns:
        mask = torch.tensor(pattern.mask)
        assert not (mask & ~allowed).any()
        assert pattern.full_pairs == int(allowed.sum())
        w = t(pattern.weights)
        assert torch.equal(w[~mask], torch.zeros(int((~mask).sum())))


@pytest.mark.parametrize("name", ["gemma2", "gpt-oss", "t5"])
def test_sparse_patterns_are_refused_where_the_softmax_is_not_plain(passes, name):
    with pytest.raises(InvalidInput, match="plain softmax"):
        lab_models.sparse_weights(passes, SparseRequest(model=f"local/{name}", text=TEXT))


@pytest.mark.parametrize("name", [*DECODERS, *ENCODERS])
def test_the_forward_pass_page_reads_every_architectures_blocks(passes, name):
    """The residual stream entering and leaving the first block is the model's own hidden
    state; where a block adds its attention and MLP to the stream (pre-norm), the stream it
    hands on is what came in plus the two (in norms: within the triangle inequality)."""
    loaded = passes.model(f"local/{name}")
    body = lab_inside.forward_pass(passes, ForwardPassRequest(model=loaded.id, text=TEXT))
    enc = loaded.tokenizer(TEXT, return_tensors="pt")
    with torch.no_grad():
        out = loaded.model(input_ids=enc["input_ids"], output_hidden_states=True)
    norms = torch.stack([h[0] for h in out.hidden_states]).norm(dim=-1)
    assert torch.allclose(t(body.entering_norms), norms[0], rtol=1e-5)
    assert torch.allclose(t(body.residual_norms)[0], norms[1], rtol=1e-5)
    before = t([body.entering_norms, *body.residual_norms[:-1]])
    added = t(body.attention_norms) + t(body.mlp_norms)
    post_norm = name in ("bert", "roberta", "distilbert")  # their blocks renormalise the sum
    assert body.renormalised is post_norm and body.rotary is (name in ROTARY)
    if not post_norm:
        assert (t(body.residual_norms) <= before + added + 1e-4).all()
