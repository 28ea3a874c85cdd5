"""The page sends X-Atlas-Key with every request about a text, the same key the Python client
computes (attention_atlas.client.route_key), so a balancer hashing on it sends both to the
replica that has the text's forward pass (deploy/kubernetes.yaml, .ci/replicas-test.sh)."""

import json
from urllib.parse import urlencode

import pytest

from attention_atlas.client import ROUTE_HEADER, route_key
from tests.e2e.pages import MINILM, settle

pytestmark = [pytest.mark.e2e, pytest.mark.slow]


def test_the_page_and_the_client_send_the_same_key(page, live_server):
    sent = []
    page.on("request", lambda r: sent.append(r) if r.method == "POST" else None)
    text = "Attention 😀 naïve: the key covers any text."
    page.goto(f"{live_server}/?{urlencode({'model': MINILM, 'text': text})}")
    page.wait_for_selector("#result:not([hidden])", timeout=90_000)
    settle(page)
    about_text = [r for r in sent if r.url.endswith(("/api/attention", "/api/attention/heads"))]
    assert about_text
    for request in about_text:
        body = json.loads(request.post_data)
        assert request.headers[ROUTE_HEADER.lower()] == route_key(body)
    assert route_key({"model": "m", "text": "a", "text_pair": "b"}) == "e8dcdbaa22eec0a9"
    assert route_key({"model": MINILM}) is None
