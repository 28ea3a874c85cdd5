"""Limits, faults, concurrency and hostile input: clear 4xx/503 answers, never a 500."""

import json
import shutil
import threading

import pytest
import torch
from fastapi.testclient import TestClient

from app.main import create_app
from atlas_engine.errors import RequestCancelled
from atlas_engine.inference.forward import run_forward
from atlas_engine.models.registry import MINILM_ID
from atlas_engine.schemas.common import ErrorDetail
from tests.conftest import make_settings

TEXT = "Robust servers answer clearly."


def fresh_client(local_checkpoints, **overrides):
    return TestClient(create_app(make_settings(local_checkpoints, **overrides)))


def test_rate_limit_answers_429_with_retry_after_and_spares_health(local_checkpoints):
    client = fresh_client(local_checkpoints, rate_limit_per_minute=3)
    codes = [client.post("/api/lab/masks", json={"n": 3}).status_code for _ in range(5)]
    assert codes[:3] == [200] * 3 and codes[3:] == [429, 429]
    limited = client.post("/api/lab/masks", json={"n": 3})
    assert int(limited.headers["retry-after"]) >= 1
    assert "at most 3 a minute" in limited.json()["detail"]
    assert all(client.get("/api/health").status_code == 200 for _ in range(10))


def test_rate_limit_counts_every_request_that_carries_a_body_whatever_its_path(local_checkpoints):
    """Before, only /api/ routes counted, so bodies sent to a page or an unknown path never did."""
    client = fresh_client(local_checkpoints, rate_limit_per_minute=3)
    paths = ["/", "/zoom", "/no/such/page", "/api/health"]
    codes = [client.post(path, content=b"x" * 100).status_code for path in paths]
    assert codes == [405, 405, 404, 429]
    assert client.post("/", content=b"x").headers["retry-after"]
    assert all(client.get(path).status_code == 200 for path in ("/", "/api/health"))


def test_bodies_the_guard_refuses_count_against_the_rate_limit(local_checkpoints):
    """Issue 50: the body guard sat outside the rate limit, so 49,925 refused requests from
    one address never met a 429. Now every request is counted before its body is."""
    client = fresh_client(local_checkpoints, rate_limit_per_minute=3, max_body_bytes=1024)
    codes = [client.post("/api/lab/masks", content=b"x" * 2048).status_code for _ in range(5)]
    assert codes == [413, 413, 413, 429, 429]


def test_body_size_limit_answers_413(local_checkpoints):
    client = fresh_client(local_checkpoints, max_body_bytes=4096)
    response = client.post("/api/attention", json={"model": MINILM_ID, "text": "x" * 10_000})
    assert response.status_code == 413
    assert "larger than 4,096 bytes" in response.json()["detail"]

    def chunks():  # no Content-Length: the limit is enforced while the body streams in
        yield b'{"model": "m", "text": "'
        for _ in range(10):
            yield b"y" * 1000
        yield b'"}'

    streamed = client.post(
        "/api/attention", content=chunks(), headers={"Content-Type": "application/json"}
    )
    assert streamed.status_code == 413


def test_a_body_over_the_limit_and_deep_nesting_are_refused_cleanly(client):
    huge = client.post("/api/attention", json={"model": MINILM_ID, "text": "a" * 2_100_000})
    assert huge.status_code == 413
    deep = "[" * 50_000 + "]" * 50_000
    for route in ("/api/attention", "/api/core/attention", "/api/lab/masks"):
        response = client.post(route, content=deep, headers={"Content-Type": "application/json"})
        assert 400 <= response.status_code < 500
        assert response.json()["detail"]
    broken = client.post(
        "/api/attention", content=b'{"model": ', headers={"Content-Type": "application/json"}
    )
    assert broken.status_code == 400 and "not valid JSON" in broken.json()["detail"]


BODY = json.dumps({"model": MINILM_ID, "text": TEXT}).encode()


@pytest.mark.parametrize(
    "content_type,said",
    [
        (None, "without a Content-Type header"),
        ("text/plain", "as 'text/plain'"),
        ("application/x-www-form-urlencoded", "what `curl -d` sends by default"),
        ("multipart/form-data; boundary=x", "as 'multipart/form-data; boundary=x'"),
    ],
)
def test_a_json_body_sent_as_anything_else_gets_415_naming_the_header(client, content_type, said):
    headers = {} if content_type is None else {"Content-Type": content_type}
    for route in ("/api/attention", "/api/core/attention", "/api/lab/masks"):
        response = client.post(route, content=BODY, headers=headers)
        assert response.status_code == 415, (route, response.text)
        body = response.json()
        assert body["code"] == "unsupported_media_type" and set(body) == {"detail", "code"}
        assert said in body["detail"] and "Content-Type: application/json" in body["detail"]


def test_json_content_types_are_read_and_a_route_without_a_body_ignores_its_type(client):
    for content_type in ("application/json; charset=utf-8", "application/merge-patch+json"):
        headers = {"Content-Type": content_type}
        response = client.post("/api/lab/masks", content=b'{"n": 3}', headers=headers)
        assert response.status_code == 200, response.text
    empty = client.post("/api/lab/masks", content=b"", headers={"Content-Type": "text/plain"})
    assert empty.status_code == 422 and empty.json()["detail"] == "Field required"
    load = client.post(
        f"/api/models/{MINILM_ID}/load", content=b"x", headers={"Content-Type": "text/plain"}
    )
    assert load.status_code == 202


def test_every_route_that_takes_a_body_documents_415_and_no_other_does(client):
    paths = client.get("/openapi.json").json()["paths"]
    operations = [(path, op) for path, item in paths.items() for op in item.values()]
    with_body = [path for path, op in operations if "requestBody" in op]
    assert len(with_body) > 25
    for path, operation in operations:
        assert ("415" in operation["responses"]) == ("requestBody" in operation), path


def test_each_documented_error_shows_an_answer_of_its_own_status(client):
    codes = {400: "invalid_body", 404: "unknown_model", 408: "body_timeout", 413: "too_large",
             415: "unsupported_media_type", 422: "invalid_field", 429: "rate_limited",
             503: "model_unavailable"}  # fmt: skip
    paths = client.get("/openapi.json").json()["paths"]
    shown = 0
    for item in paths.values():
        for operation in item.values():
            for status, response in operation["responses"].items():
                example = response.get("content", {}).get("application/json", {}).get("example")
                if int(status) >= 400 and example is not None:
                    assert ErrorDetail.model_validate(example).code == codes[int(status)]
                    shown += 1
    assert shown > 150
    example = paths["/api/lab/masks"]["post"]["responses"]["415"]["content"]["application/json"]
    sent = client.post("/api/lab/masks", content=b"{}", headers={"Content-Type": "text/plain"})
    assert sent.json() == example["example"]  # the server's own words


@pytest.mark.parametrize(
    "model,detail",
    [
        ("sentence-transformers/all-MiniLM-L6", f"did you mean {MINILM_ID!r}?"),
        ("all-minilm-l6-v2", f"did you mean {MINILM_ID!r}?"),  # its name, in any case
        ("SmolLM2-135M-Instruct", "did you mean 'HuggingFaceTB/SmolLM2-135M-Instruct'?"),
        ("gpt-2", "did you mean 'gpt2'"),
        ("nope", "Unknown model 'nope'. Available: HuggingFaceTB/SmolLM2-135M-Instruct,"),
    ],
)
def test_an_unknown_model_names_the_nearest_id_or_lists_them_all(client, model, detail):
    for response in (
        client.post("/api/attention", json={"model": model, "text": TEXT}),
        client.get(f"/api/models/{model}/status"),
    ):
        assert response.status_code == 404
        assert response.json()["code"] == "unknown_model"
        assert detail in response.json()["detail"], response.json()["detail"]


@pytest.mark.parametrize(
    "route,body,detail",
    [
        ("/api/lab/masks", {"n": 8, "windw": 2}, "windw: unknown field; did you mean 'window'?"),
        ("/api/attention", {"layer": [0]}, "layer: unknown field; did you mean 'layers'?"),
        (
            "/api/attention/search",
            {"query": {"kind": "pair", "sourc": 1, "target": 0}},
            "query.pair.sourc: unknown field; did you mean 'source'?",
        ),
        (
            "/api/attention/ablate",
            {"heads": [{"layr": 0, "head": 0}]},
            "heads.0.layr: unknown field; did you mean 'layer'?",
        ),
        (
            "/api/attention/compare",
            {"layer": 0, "head": 0, "other": {"layer": 1, "head": 0, "txt": "x"}},
            "other.txt: unknown field; did you mean 'text'?",
        ),
        (
            "/api/attention",
            {"zzzz": 1},
            "zzzz: unknown field; the fields here are model, text, text_pair, layers, heads,",
        ),
    ],
)
def test_an_unknown_field_names_the_nearest_field_of_its_own_object(client, route, body, detail):
    if route != "/api/lab/masks":
        body = {"model": MINILM_ID, "text": TEXT, **body}
    response = client.post(route, json=body)
    assert response.status_code == 422, response.text
    answer = response.json()
    assert answer["code"] == "invalid_field" and detail in answer["detail"], answer["detail"]


def test_security_headers_on_every_answer_and_cors_off_by_default(client, local_checkpoints):
    for response in (
        client.get("/"),
        client.get("/api/models"),
        client.post("/api/attention", json={"model": "nope", "text": "x"}),
    ):
        csp = response.headers["content-security-policy"]
        assert (
            "script-src 'self'" in csp
            and "unsafe-inline" not in csp.split("script-src")[1].split(";")[0]
        )
        assert response.headers["x-content-type-options"] == "nosniff"
    preflight = client.options(
        "/api/models",
        headers={"Origin": "https://evil.example", "Access-Control-Request-Method": "GET"},
    )
    assert "access-control-allow-origin" not in preflight.headers
    allowed = fresh_client(local_checkpoints, cors_origins=["https://lab.example"])
    answer = allowed.get("/api/models", headers={"Origin": "https://lab.example"})
    assert answer.headers["access-control-allow-origin"] == "https://lab.example"
    assert answer.headers["access-control-expose-headers"] == "Server-Timing"
    keyed = allowed.options(
        "/api/attention",
        headers={"Origin": "https://lab.example", "Access-Control-Request-Method": "POST",
                 "Access-Control-Request-Headers": "content-type, x-atlas-key"},
    )  # fmt: skip
    assert keyed.status_code == 200  # a page there may send the routing key, as ours does


def test_no_request_reaches_the_filesystem(client):
    for model in ("../../etc/passwd", "/etc/passwd", "sentence-transformers/../../etc", "C:\\x"):
        response = client.post("/api/attention", json={"model": model, "text": "hi"})
        assert response.status_code == 404
        assert "Unknown model" in response.json()["detail"]
    assert client.get("/api/models/..%2F..%2Fetc%2Fpasswd/status").status_code == 404
    assert client.get("/static/../app/config.py").status_code == 404


def test_allow_list_hides_other_models(local_checkpoints):
    client = fresh_client(local_checkpoints, allowed_models=[MINILM_ID])
    assert [m["id"] for m in client.get("/api/models").json()["models"]] == [MINILM_ID]
    response = client.post("/api/attention", json={"model": "local/gpt2-tiny", "text": "hi"})
    assert response.status_code == 404


def copy_checkpoint(source, target):
    shutil.copytree(source, target)
    return target


def test_corrupt_and_missing_weights_answer_503_while_others_work(local_checkpoints, tmp_path):
    corrupt = copy_checkpoint(local_checkpoints["local/gpt2-tiny"], tmp_path / "corrupt")
    (corrupt / "model.safetensors").write_bytes(b"this is not a safetensors file")
    missing = copy_checkpoint(local_checkpoints["local/gpt2-tiny"], tmp_path / "missing")
    (missing / "model.safetensors").unlink()
    gone = tmp_path / "gone"
    client = TestClient(
        create_app(
            make_settings(
                local_checkpoints,
                extra_models=[
                    f"bad/corrupt={corrupt}",
                    f"bad/missing={missing}",
                    f"bad/gone={gone}",
                ],
            )
        )
    )
    for model_id in ("bad/corrupt", "bad/missing", "bad/gone"):
        response = client.post("/api/attention", json={"model": model_id, "text": TEXT})
        assert response.status_code == 503, response.text
        assert model_id in response.json()["detail"] or "config.json" in response.json()["detail"]
    listed = {m["id"]: m for m in client.get("/api/models").json()["models"]}
    assert listed["bad/gone"]["available"] is False
    status = client.get("/api/models/bad/corrupt/status").json()
    assert status["state"] == "failed" and status["error"]
    assert client.post("/api/attention", json={"model": MINILM_ID, "text": TEXT}).status_code == 200


def test_pickle_checkpoints_and_remote_code_are_never_used(local_checkpoints, tmp_path):
    folder = copy_checkpoint(local_checkpoints["local/gpt2-tiny"], tmp_path / "pickled")
    (folder / "model.safetensors").unlink()
    torch.save({"x": torch.zeros(1)}, folder / "pytorch_model.bin")
    remote = tmp_path / "remote"
    remote.mkdir()
    marker = tmp_path / "pwned"
    (remote / "config.json").write_text(
        json.dumps({"model_type": "evil", "auto_map": {"AutoModel": "evil.EvilModel"}})
    )
    (remote / "evil.py").write_text(f"open({str(marker)!r}, 'w').write('ran')\n")
    shutil.copy(local_checkpoints["local/gpt2-tiny"] / "model.safetensors", remote)  # all else fine
    client = fresh_client(
        local_checkpoints, extra_models=[f"bad/pickle={folder}", f"bad/remote={remote}"]
    )
    pickled = client.post("/api/attention", json={"model": "bad/pickle", "text": TEXT})
    assert pickled.status_code == 503
    remote_code = client.post("/api/attention", json={"model": "bad/remote", "text": TEXT})
    assert remote_code.status_code == 503
    assert "never run" in remote_code.json()["detail"]
    assert not marker.exists()


def test_concurrent_first_requests_load_a_model_once(local_checkpoints):
    app = create_app(make_settings(local_checkpoints))
    client = TestClient(app)
    codes = []
    threads = [
        threading.Thread(
            target=lambda i=i: codes.append(
                client.post(
                    "/api/attention", json={"model": "local/bert-tiny", "text": f"load {i}"}
                ).status_code
            )
        )
        for i in range(10)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert codes == [200] * 10
    assert app.state.manager.load_count["local/bert-tiny"] == 1


def test_requests_for_different_models_do_not_corrupt_each_other(client):
    jobs = [(MINILM_ID, f"The encoder reads sentence {i}.") for i in range(6)]
    jobs += [("local/gpt2-tiny", f"The decoder reads sentence {i}.") for i in range(6)]
    expected = {
        job: client.post("/api/attention", json={"model": job[0], "text": job[1]}).json()
        for job in jobs
    }
    client.app.state.forward_cache.clear_model(MINILM_ID)
    client.app.state.forward_cache.clear_model("local/gpt2-tiny")
    results = {}

    def run(job):
        results[job] = client.post("/api/attention", json={"model": job[0], "text": job[1]}).json()

    threads = [threading.Thread(target=run, args=(job,)) for job in jobs * 2]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for job in jobs:
        assert results[job]["attentions"] == expected[job]["attentions"]
        assert results[job]["tokens"] == expected[job]["tokens"]


def test_a_cancelled_forward_pass_stops_and_does_not_poison_the_cache(client, app):
    loaded = app.state.manager.get(MINILM_ID)
    layers_run = []

    def stop_after_two():
        layers_run.append(1)
        return len(layers_run) > 2

    with pytest.raises(RequestCancelled):
        run_forward(loaded, "a cancelled request", None, stop_after_two)
    assert len(layers_run) == 3  # stopped at the third layer of six
    cache = app.state.forward_cache
    with pytest.raises(RequestCancelled):
        cache.get_or_compute(
            (MINILM_ID, "cancel me", None),
            lambda: run_forward(loaded, "cancel me", None, lambda: True),
        )
    response = client.post("/api/attention", json={"model": MINILM_ID, "text": "cancel me"})
    assert response.status_code == 200 and response.json()["cached"] is False


def test_forward_cache_respects_its_byte_bound(local_checkpoints):
    app = create_app(
        make_settings(local_checkpoints, forward_cache_bytes=3_000_000, forward_cache_entries=100)
    )
    client = TestClient(app)
    for i in range(30):
        text = " ".join(["word"] * 40) + f" {i}"
        assert (
            client.post(
                "/api/attention", json={"model": MINILM_ID, "text": text, "layers": [0]}
            ).status_code
            == 200
        )
    cache = app.state.forward_cache
    assert 0 < cache.nbytes <= 3_000_000
    assert len(cache) < 30


@pytest.mark.slow
def test_biggest_whole_map_input_on_biggest_default_model_fits(client, app):
    """512 tokens on SmolLM2, every layer in u8 (what the explorer's all-heads grid loads)."""
    from atlas_engine.models.registry import SMOLLM2_ID

    loaded = app.state.manager.get(SMOLLM2_ID)
    text = " ".join(["token"] * 600)
    ids = loaded.tokenizer(text)["input_ids"][: loaded.full_map_tokens]
    text = loaded.tokenizer.decode(ids)
    n = len(loaded.tokenizer(text)["input_ids"])
    assert n == loaded.full_map_tokens == 512
    response = client.post(
        "/api/attention", json={"model": SMOLLM2_ID, "text": text, "format": "u8"}
    )
    assert response.status_code == 200 and len(response.content) > 30 * 9 * 512 * 512
    cache = app.state.forward_cache
    assert cache.nbytes <= cache.max_bytes
    assert client.post("/api/attention/heads", json={"model": SMOLLM2_ID, "text": text}).json()


def test_loaded_models_are_bounded_least_recently_used_first(local_checkpoints):
    app = create_app(make_settings(local_checkpoints, max_loaded_models=2))
    client = TestClient(app)
    for model in ("local/bert-tiny", "local/gpt2-tiny", "local/bert-tiny", "local/roberta-tiny"):
        assert client.post("/api/attention", json={"model": model, "text": TEXT}).status_code == 200
    loaded = {m["id"]: m["loaded"] for m in client.get("/api/models").json()["models"]}
    # gpt2-tiny was used least recently when roberta-tiny arrived.
    assert (
        loaded["local/bert-tiny"] and loaded["local/roberta-tiny"] and not loaded["local/gpt2-tiny"]
    )
    assert (
        client.post(
            "/api/attention", json={"model": "local/gpt2-tiny", "text": "again"}
        ).status_code
        == 200
    )
    assert app.state.manager.load_count["local/gpt2-tiny"] == 2
