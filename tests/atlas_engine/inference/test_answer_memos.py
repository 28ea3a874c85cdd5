"""What keeps a repeated answer cheap: the memo of replayed layers (within the bytes the forward
cache's passes leave free) and the memo of token counts; neither changes an answer."""

import numpy as np
import pytest
import torch

import atlas_engine.inference.forward as forward_module
from atlas_engine.formats import decode_atls
from atlas_engine.inference.cache import ForwardCache
from atlas_engine.inference.forward import ForwardResult, count_tokens
from atlas_engine.models.registry import MINILM_ID


def pass_of(nbytes: int) -> ForwardResult:
    """A stand-in forward pass that holds `nbytes` (all of it in hidden states)."""
    return ForwardResult(
        tokens=[], raw_tokens=[], token_ids=[], special=[], segments=None, words=[],
        stored_maps=None, hidden_inputs=torch.zeros(nbytes // 4), forward_seconds=0.0,
    )  # fmt: skip


def maps_of(nbytes: int) -> torch.Tensor:
    return torch.zeros(nbytes // 4)


def test_replayed_layers_use_only_what_the_passes_leave_free():
    cache = ForwardCache(max_entries=10, max_bytes=1000)
    cache.get_or_compute("a", lambda: pass_of(400))
    cache.keep_layer("a", 0, maps_of(200))
    cache.keep_layer("a", 1, maps_of(200))
    assert cache.nbytes == 800
    assert cache.replayed_layer("a", 0) is not None  # now the most recently used
    cache.keep_layer("a", 2, maps_of(400))  # room is made by forgetting the oldest layer
    assert cache.replayed_layer("a", 1) is None
    assert cache.replayed_layer("a", 0) is not None and cache.nbytes == 1000
    cache.keep_layer("a", 3, maps_of(800))  # more than the passes leave: not kept
    assert cache.replayed_layer("a", 3) is None and cache.nbytes <= 1000
    cache.get_or_compute("b", lambda: pass_of(400))  # a pass comes first: layers make room
    assert cache.nbytes <= 1000 and len(cache) == 2
    assert cache.replayed_layer("a", 2) is None
    cache.clear_model("a"[0])  # keys here are strings: clear_model reads key[0]
    assert cache.nbytes == 400


def test_a_passs_count_never_changes_while_it_is_cached():
    """Memos that grow with use (top-k, statistics) are counted from the start, so eviction
    subtracts what was added."""
    cache = ForwardCache(max_entries=2, max_bytes=10_000)
    first = pass_of(400)
    cache.get_or_compute("a", lambda: first)
    first.statistics[0] = {"entropy": torch.zeros(1000)}  # grows past its count
    cache.get_or_compute("b", lambda: pass_of(400))
    cache.get_or_compute("c", lambda: pass_of(400))  # evicts "a"
    assert cache.nbytes == 800 and len(cache) == 2


def test_a_repeated_layer_is_answered_from_the_memo_with_the_same_bytes(client, monkeypatch):
    text = "The memo of replayed layers answers this sentence's layer two again."
    body = {"model": MINILM_ID, "text": text, "layers": [2], "format": "u8"}
    first = client.post("/api/attention", json=body)
    replays = []
    real = ForwardResult.layer_maps
    monkeypatch.setattr(
        ForwardResult, "layer_maps", lambda self, *a: replays.append(a) or real(self, *a)
    )
    again = client.post("/api/attention", json=body)
    some_heads = client.post("/api/attention", json={**body, "heads": [5, 1], "format": "f32"})
    assert first.status_code == again.status_code == some_heads.status_code == 200
    assert replays == []  # neither replayed the layer again
    meta, codes = decode_atls(again.content)
    assert meta["cached"] is True
    assert np.array_equal(codes, decode_atls(first.content)[1])
    _, weights = decode_atls(some_heads.content)  # (1, 2, T, T) float32, from the memo
    exact = client.post("/api/attention", json={**body, "format": "f32"}).content
    assert np.array_equal(weights[0], decode_atls(exact)[1][0][[5, 1]])


def test_a_token_count_is_remembered_and_the_limits_still_apply(app, monkeypatch):
    loaded = app.state.manager.get(MINILM_ID)
    text = "a count remembered " * 30  # 92 tokens with [CLS] and [SEP]
    calls = []
    real = forward_module.tokenize
    monkeypatch.setattr(
        forward_module, "tokenize", lambda *a, **k: calls.append(1) or real(*a, **k)
    )
    n = count_tokens(loaded, text, None)
    assert count_tokens(loaded, text, None) == n and len(calls) == 1
    assert count_tokens(loaded, text, "and a pair") > n and len(calls) == 2
    with pytest.raises(Exception, match=f"the text is {n} tokens long"):
        count_tokens(loaded, text, None, limit=n - 1)
    assert len(calls) == 2


def test_a_layer_nobody_asked_for_only_takes_room_nobody_uses():
    cache = ForwardCache(max_entries=10, max_bytes=1000)
    cache.get_or_compute("a", lambda: pass_of(400))
    cache.keep_layer("a", 0, maps_of(400))
    cache.keep_layer("a", 1, maps_of(400), make_room=False)  # would push layer 0 out: not kept
    assert cache.replayed_layer("a", 1) is None and cache.replayed_layer("a", 0) is not None
    cache.keep_layer("a", 2, maps_of(200), make_room=False)  # fits in the free bytes: kept
    assert cache.replayed_layer("a", 2) is not None and cache.nbytes == 1000


def test_a_new_pass_hands_its_own_maps_to_the_memo_so_no_layer_is_replayed(
    app, client, monkeypatch
):
    """The first answer on a new text reads the maps the model computed in its eager pass,
    and so do the next requests for the other layers (the explorer asks for them next)."""
    text = "The model's own maps answer every layer of this new sentence without a replay."
    replays = []
    real = ForwardResult.layer_maps
    monkeypatch.setattr(
        ForwardResult, "layer_maps", lambda self, *a: replays.append(a) or real(self, *a)
    )
    body = {"model": MINILM_ID, "text": text, "format": "f32"}
    first = client.post("/api/attention", json={**body, "layers": [3]})
    rest = client.post("/api/attention", json=body)
    assert first.status_code == rest.status_code == 200
    assert replays == []
    meta, weights = decode_atls(rest.content)  # (L, H, T, T)
    assert meta["cached"] is True
    assert np.array_equal(weights[3], decode_atls(first.content)[1][0])
    loaded = app.state.manager.get(MINILM_ID)
    with torch.inference_mode():
        own = loaded.model(**loaded.tokenizer(text, return_tensors="pt"), output_attentions=True)
    assert np.array_equal(weights, torch.stack([a[0] for a in own.attentions]).numpy())
    monkeypatch.undo()  # a replay of the same pass gives the same numbers, bit for bit
    result, _ = app.state.forward_cache.get_or_compute((MINILM_ID, text, None), None)
    assert all(np.array_equal(result.layer_maps(i).numpy(), weights[i]) for i in range(6))
