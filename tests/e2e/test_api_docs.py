"""Issue 9.1: the API docs page works offline under the app's own CSP."""

import json
import urllib.request

import pytest

from tests.e2e.helpers import wait_js

pytestmark = [pytest.mark.e2e, pytest.mark.slow]


def test_docs_list_every_operation_and_try_it_out_answers_without_leaving_the_origin(
    page, live_server
):
    off_origin = []
    page.on(
        "request",
        lambda r: (
            None if r.url.startswith((live_server, "data:", "blob:")) else off_origin.append(r.url)
        ),
    )
    with urllib.request.urlopen(f"{live_server}/openapi.json") as response:
        paths = json.loads(response.read())["paths"]
    operations = sum(len(item) for item in paths.values())
    page.goto(f"{live_server}/docs")
    wait_js(page, f"document.querySelectorAll('.opblock').length === {operations}")
    block = (
        page.locator(".opblock-post", has_text="/api/attention")
        .filter(has_not_text="/detail")
        .first
    )
    block.locator(".opblock-summary").click()
    block.get_by_role("button", name="Try it out").click()
    block.get_by_role("button", name="Execute").click()
    status = block.locator(".live-responses-table tbody .response-col_status").first
    status.wait_for(timeout=60_000)
    assert status.text_content().strip() == "200"
    assert "attentions" in block.locator(".live-responses-table").text_content()
    assert off_origin == []
    assert not [e for e in page.errors if "Content Security Policy" in e], page.errors


def test_redoc_points_to_the_local_docs(live_server):
    with urllib.request.urlopen(f"{live_server}/redoc") as response:
        assert response.url.endswith("/docs") and b"swagger-ui" in response.read()
