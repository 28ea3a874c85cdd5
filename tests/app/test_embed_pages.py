"""`?embed=1` (issue 53): the head page and the scatter render without their chrome and may be
framed by another site; no other page, and neither page without it, may be framed."""

import pytest

MODEL = "sentence-transformers/all-MiniLM-L6-v2"


@pytest.mark.parametrize("path", [f"/head/{MODEL}/1/2", f"/heads/{MODEL}"])
def test_the_corpus_pages_embed_without_chrome_and_may_be_framed(client, path):
    embedded = client.get(f"{path}?run=1&embed=1")
    assert embedded.status_code == 200
    assert "frame-ancestors *" in embedded.headers["content-security-policy"]
    assert "x-frame-options" not in embedded.headers
    assert 'class="embed"' in embedded.text and 'class="topbar"' not in embedded.text
    plain = client.get(path)
    assert "frame-ancestors 'none'" in plain.headers["content-security-policy"]
    assert plain.headers["x-frame-options"] == "DENY"
    assert 'class="topbar"' in plain.text and 'class="embed"' not in plain.text


@pytest.mark.parametrize("path", ["/?embed=1", "/zoom?embed=1", "/api/models?embed=1"])
def test_no_other_page_may_be_framed(client, path):
    answer = client.get(path)
    assert "frame-ancestors 'none'" in answer.headers["content-security-policy"]
    assert answer.headers["x-frame-options"] == "DENY"
    assert 'class="embed"' not in answer.text
