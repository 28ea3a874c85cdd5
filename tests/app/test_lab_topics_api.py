"""The curriculum's lab routes (issue 11): each answer checked against attention_core or
transformers on the same input, and bad requests refused with a clear 422."""

import pytest
import torch

import attention_core as ac
from atlas_engine.schemas.lab_models import MINILM, SMOLLM2

TEXT = "The animal didn't cross the street because it was too tired."


def post(client, path, body, status=200):
    response = client.post(f"/api/lab/{path}", json=body)
    assert response.status_code == status, response.text
    return response.json()


def test_the_three_scores_match_attention_core_and_count_their_parameters(client):
    q = [[1.0, 0.5], [0.3, 1.2], [0.8, 0.6]]
    k = [[1.0, 0.5], [0.4, 1.0], [0.9, 0.3]]
    v = [[0.1, 0.2], [0.5, 0.8], [0.3, 0.1]]
    body = post(client, "scoring", {"q": q, "k": k, "v": v, "d_attn": 3})
    dot = body["variants"][0]
    expected = ac.scaled_dot_product_attention(*(torch.tensor(m).double() for m in (q, k, v)))
    assert torch.allclose(torch.tensor(dot["weights"]).double(), expected.weights)
    assert [x["parameters"] for x in body["variants"]] == [0, 2 * 2, 2 * 3 * 2 + 3]
    assert dot["macs"] == 3 * 3 * 2 + 3 * 3 * 2
    for variant in body["variants"]:
        assert torch.allclose(torch.tensor(variant["weights"]).sum(-1), torch.ones(3))


def test_scoring_wants_all_three_matrices_or_none(client):
    assert post(client, "scoring", {"q": [[1.0]]}, 422)["code"] == "input_rule"
    bad = {"q": [[1.0, 2.0]], "k": [[1.0]], "v": [[1.0]]}
    assert "columns" in post(client, "scoring", bad, 422)["detail"]


@pytest.mark.parametrize("causal", [False, True])
def test_tiles_end_where_exact_attention_is_and_skip_future_tiles(client, causal):
    body = post(client, "tiling", {"n_q": 9, "n_k": 9, "d": 3, "block_q": 4, "block_k": 2,
                                    "causal": causal})  # fmt: skip
    assert body["max_abs_diff"] < 1e-12
    assert len(body["steps"]) == 3 * 5
    assert body["largest_block_cells"] == 8 and body["full_cells"] == 81
    assert (body["blocks_skipped"] > 0) == causal
    last = [s for s in body["steps"] if s["q_start"] == 8][-1]
    assert torch.allclose(
        torch.tensor(last["partial_output"]), torch.tensor(body["exact_output"][8:])
    )


def test_linear_attention_orders_agree_and_its_weights_differ_from_softmax(client):
    body = post(client, "linear", {"n": 12, "d": 4, "causal": True})
    assert body["reorder_max_abs_diff"] < 1e-12
    implied = torch.tensor(body["implied_weights"])
    assert torch.equal(implied.triu(1), torch.zeros(12, 12))  # causal
    assert 0 < body["mean_total_variation"] < 1
    assert body["curve_n"][-1] == 10**6
    assert body["curve_macs_linear"][-1] < body["curve_macs_softmax"][-1]


def test_positions_shift_and_rope_offsets(client):
    body = post(client, "positions", {"n": 24, "d_model": 32, "offset": 5, "head_dim": 16})
    assert body["shift_max_error"] < 1e-6
    assert body["rope_diagonal_spread"] < 1e-10
    assert body["rope_scores"][0][0] == pytest.approx(body["unrotated_score"])
    assert "even" in post(client, "positions", {"d_model": 7}, 422)["detail"]


def test_cost_at_a_million_tokens_comes_from_formulas(client):
    body = post(client, "cost", {"n": 10**6, "d_k": 64, "d_v": 64, "window": 256})
    rows = {r["kind"]: r for r in body["rows"]}
    assert rows["none"]["pairs"] == 10**12
    assert rows["causal"]["pairs"] == 10**6 * (10**6 + 1) // 2
    assert rows["sliding_window"]["pairs"] == 10**6 * 513 - 256 * 257
    assert rows["bigbird"]["exact"] is False and rows["none"]["exact"] is True
    assert rows["none"]["score_bytes"] == 2 * 10**12
    assert body["tiled_score_bytes"] == 128 * 64 * 2
    assert post(client, "cost", {"n": 10**6 + 1}, 422)["code"] == "invalid_field"


def test_kv_cache_of_smollm2_and_its_mha_and_mqa_versions(client):
    body = post(client, "kv-cache", {"layers": 30, "heads": 9, "kv_heads": 3, "head_dim": 64,
                                      "tokens": 8192})  # fmt: skip
    rows = {r["name"]: r for r in body["rows"]}
    assert rows["GQA"]["bytes_per_token"] == 23_040
    assert rows["GQA"]["total_bytes"] == 23_040 * 8192
    assert rows["MHA"]["bytes_per_token"] == 3 * 23_040
    assert rows["MQA"]["bytes_per_token"] == 23_040 // 3
    assert "divide" in post(client, "kv-cache", {"heads": 9, "kv_heads": 2}, 422)["detail"]


def test_own_kv_heads_replay_the_model_and_pooling_moves_the_maps(client):
    body = post(client, "heads", {"model": MINILM, "text": TEXT, "layer": 0, "kv_heads": 4})
    assert body["replay_max_abs_diff"] < 1e-5
    assert body["options"] == [12, 6, 4, 3, 2, 1]
    assert body["pooled_group_of"] == [h // 3 for h in range(12)]
    assert all(0 < m < 1 for m in body["moved"])
    same = post(client, "heads", {"model": MINILM, "text": TEXT, "kv_heads": 12})
    assert max(same["moved"]) < 1e-6


def test_smollm2_shares_three_kv_heads_and_pools_to_one(client):
    body = post(client, "heads", {"model": SMOLLM2, "text": TEXT, "layer": 16, "kv_heads": 1})
    assert body["group_of"] == [0, 0, 0, 1, 1, 1, 2, 2, 2]
    assert body["pooled_group_of"] == [0] * 9 and body["replay_max_abs_diff"] == 0.0
    refused = post(client, "heads", {"model": SMOLLM2, "text": TEXT, "kv_heads": 2}, 422)
    assert "[3, 1]" in refused["detail"]


def test_cross_attention_of_a_sentence_with_itself_is_self_attention(client):
    body = post(client, "cross", {"model": MINILM, "text_a": TEXT, "text_b": TEXT, "layer": 2})
    maps = client.post("/api/attention", json={"model": MINILM, "text": TEXT, "layers": [2]})
    own = torch.tensor(maps.json()["attentions"][0])  # (H, T, T), transformers' own
    assert torch.allclose(torch.tensor(body["weights"]), own, atol=1e-5)
    other = post(client, "cross", {"text_a": "Where is it?", "text_b": TEXT})
    assert len(other["weights"][0]) == len(other["tokens_a"]) != len(other["tokens_b"])
    assert len(other["weights"][0][0]) == len(other["tokens_b"])
    refused = post(client, "cross", {"model": SMOLLM2, "text_a": "a", "text_b": "b"}, 422)
    assert "decoder" in refused["detail"]


def test_sparse_patterns_renormalise_a_real_head_and_report_what_they_drop(client):
    body = post(client, "sparse", {"model": MINILM, "text": TEXT, "layer": 1, "head": 3})
    full = torch.tensor(body["full_weights"])
    kinds = {p["kind"]: p for p in body["patterns"]}
    assert len(kinds) == 7
    for p in kinds.values():
        mask, w = torch.tensor(p["mask"]), torch.tensor(p["weights"])
        assert torch.equal(w[~mask], torch.zeros(int((~mask).sum())))
        assert torch.allclose(w.sum(-1), torch.ones(len(w)), atol=1e-5)
        dropped = 1 - (full * mask).sum(-1)
        assert p["dropped_mass"] == pytest.approx(float(dropped.mean()), abs=1e-5)
        assert p["pairs"] == int(mask.sum())


def test_sparse_patterns_on_a_decoder_stay_causal(client):
    body = post(client, "sparse", {"model": SMOLLM2, "text": TEXT, "layer": 16, "head": 0})
    n = len(body["tokens"])
    for p in body["patterns"]:
        assert not torch.tensor(p["mask"]).triu(1).any()
        assert p["full_pairs"] == n * (n + 1) // 2


def test_a_smollm2_head_replays_exactly_with_rope_and_changes_without(client):
    body = post(client, "rope-head", {"model": SMOLLM2, "text": TEXT, "layer": 16, "head": 0})
    assert body["replay_max_abs_diff"] == 0.0
    with_prev, without_prev = body["previous_token_share"]
    assert with_prev > 0.5 > without_prev
    assert "rotary" in post(client, "rope-head", {"model": MINILM, "text": TEXT}, 422)["detail"]


def test_padded_keys_get_zero_weight_and_real_rows_match_each_sentence_alone(client):
    sentences = ["A short one.", "This sentence is quite a bit longer than the first."]
    body = post(client, "padding", {"sentences": sentences, "layer": 2, "head": 5})
    short, long = body["sentences"]
    assert body["attention_mask"][0].count(0) == body["seq_len"] - short["length"] > 0
    assert short["max_weight_on_padding"] == 0.0
    assert short["alone_max_abs_diff"] < 1e-5 and long["alone_max_abs_diff"] < 1e-5
    assert short["tokens"][-1] == "[PAD]"


@pytest.mark.parametrize(
    ("path", "body", "needle"),
    [
        ("sparse", {"model": MINILM, "text": "word " * 70}, "at most 64"),
        ("sparse", {"model": MINILM, "text": TEXT, "global_tokens": [40]}, "out of range"),
        ("sparse", {"model": MINILM, "text": TEXT, "layer": 6}, "out of range"),
        ("padding", {"sentences": ["one"]}, "at least 2"),
        ("padding", {"model": SMOLLM2, "sentences": ["a", "b"]}, "decoder"),
        ("heads", {"model": MINILM, "text": TEXT, "text_pair": "x"}, "text_pair"),
    ],
)
def test_bad_lab_requests_get_a_clear_422(client, path, body, needle):
    assert needle in post(client, path, body, 422)["detail"]


def test_an_unknown_model_is_404(client):
    assert post(client, "sparse", {"model": "no/such", "text": TEXT}, 404)["code"]
