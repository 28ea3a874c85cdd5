"""Request bodies are UTF-8 JSON with each key once, as docs/api.md says (app.api.strict_json):
Starlette's reader guessed UTF-16 and UTF-32, skipped a byte order mark and kept the last of
two equal keys, so a body could read one way to a proxy and another to the server."""

import codecs
import json

import pytest

from app.api.strict_json import StrictJSONRoute

MASKS = {"n": 3, "window": 1}
ROUTES = ("/api/lab/masks", "/api/core/attention", "/api/attention")


def post(client, route, body: bytes):
    return client.post(route, content=body, headers={"Content-Type": "application/json"})


@pytest.mark.parametrize(
    "encoded,said",
    [
        (codecs.BOM_UTF8 + json.dumps(MASKS).encode(), "byte order mark (EF BB BF)"),
        (json.dumps(MASKS).encode("utf-16"), "UTF-16 or UTF-32 byte order mark"),
        (json.dumps(MASKS).encode("utf-16-le"), "NUL bytes"),
        (json.dumps(MASKS).encode("utf-32-be"), "NUL bytes"),
        (b'{"n": 3, "label": "caf\xe9"}', "byte 22 (0xe9) is not UTF-8"),  # Latin-1
    ],
    ids=["utf-8 bom", "utf-16", "utf-16 without bom", "utf-32 without bom", "latin-1"],
)
def test_a_body_that_is_not_utf8_gets_400_saying_so(client, encoded, said):
    for route in ROUTES:
        response = post(client, route, encoded)
        assert response.status_code == 400, (route, response.text)
        body = response.json()
        assert body["code"] == "invalid_body" and "not UTF-8 JSON" in body["detail"], body
        assert said in body["detail"], body


def test_a_key_twice_in_one_object_gets_400_naming_it(client):
    twice = b'{"n": 3, "window": 1, "n": 4}'
    response = post(client, "/api/lab/masks", twice)
    assert response.status_code == 400
    assert response.json() == {
        "detail": 'the body has the key "n" twice in one object; send each key once',
        "code": "invalid_body",
    }
    nested = b'{"q": [[1.0]], "k": [[1.0]], "v": [[1.0]], "options": {"a": 1, "a": 2}}'
    assert '"a" twice' in post(client, "/api/core/attention", nested).json()["detail"]


def test_utf8_json_reads_as_before(client):
    sentence = json.dumps({"model": "local/gpt2-tiny", "text": "naïve 😀 中文"}, ensure_ascii=False)
    response = post(client, "/api/attention", sentence.encode("utf-8"))
    assert response.status_code == 200, response.text
    assert post(client, "/api/lab/masks", json.dumps(MASKS).encode()).status_code == 200


def test_every_api_route_reads_its_body_strictly():
    from app.api.routes import attention, core, health, lab, lessons, models

    routes = [r for m in (attention, core, health, lab, lessons, models) for r in m.router.routes]
    assert len(routes) > 30 and all(isinstance(r, StrictJSONRoute) for r in routes)
