"""The head page's projection and the corpus pages' embed mode in Chromium (issue 53, part 4), on
the small MiniLM corpus run of tests/e2e/conftest.py: the queries and keys drawn, recoloured and
re-planed without a long task, state in the URL, a click opening the token's text in the
explorer; `?embed=1` without chrome, framed by another site, at 1280 and 390 px, axe-clean."""

from __future__ import annotations

import csv
import functools
import http.server
import io
import json
import threading
import urllib.parse

import pytest
from axe_playwright_python.sync_playwright import Axe

from tests.e2e.helpers import LONG_TASKS, wait_js
from tests.e2e.pages import MINILM

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

FITS = "document.documentElement.scrollWidth <= window.innerWidth + 1"


def serious(page) -> list[str]:
    violations = Axe().run(page).response["violations"]
    return [v["id"] for v in violations if v["impact"] in ("critical", "serious")]


@pytest.mark.parametrize("width", [1280, 390])
def test_the_projection_draws_recolours_and_opens_a_token(browser, corpus_server, width):
    context = browser.new_context(viewport={"width": width, "height": 900})
    page = context.new_page()
    errors = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.add_init_script(LONG_TASKS)
    page.goto(f"{corpus_server}/head/{MINILM}/1/2")
    wait_js(page, "!document.querySelector('#pj').hidden", 60)
    page.fill("#pj-tokens", "128")
    page.click("#pj-form button")
    wait_js(page, "document.querySelector('#pj-plot canvas')", 120)
    assert page.inner_text("#pj-status").startswith("128 tokens of ")
    assert "project=1" in page.url and "ptokens=128" in page.url
    assert "variance on the plane" in page.inner_text("#pj-metrics")
    for select, value in (("#pj-colour", "token"), ("#pj-colour", "received"), ("#pj-plane", "o")):
        page.evaluate("window.__long = []")
        page.select_option(select, value)
        page.wait_for_timeout(300)
        assert max(page.evaluate("window.__long"), default=0) < 200, (select, value)
    assert "pcolour=received" in page.url and "plane=o" in page.url
    assert page.evaluate(FITS), "the page scrolls sideways"
    assert not serious(page)
    # A reload of the link draws the same picture.
    page.reload()
    wait_js(page, "document.querySelector('#pj-plot canvas')", 120)
    assert page.eval_on_selector("#pj-colour", "s => s.value") == "received"
    page.locator("#pj-plot").scroll_into_view_if_needed()
    x, y = page.evaluate("document.querySelector('#pj-plot').pixelOf(0, 3)")
    page.mouse.move(x, y)
    wait_js(page, "!document.querySelector('.cloud-tip').hidden")
    assert "position 3" in page.inner_text(".cloud-tip")
    page.mouse.click(x, y)
    page.wait_for_url("**/?*")
    query = urllib.parse.parse_qs(urllib.parse.urlsplit(page.url).query)
    assert query["model"] == [MINILM] and query["layer"] == ["1"] and query["head"] == ["2"]
    assert query["q"] == ["3"] and query["text"][0]
    assert not errors
    context.close()


def test_headvis_colours_and_the_four_exports_carry_what_is_drawn(browser, corpus_server, tmp_path):
    """Coloured by HeadVis's activation (position 0 grey: HeadVis leaves it out) and by the text's
    max_activation; PNG and SVG of the drawing under a heading, JSON of the answer, CSV a row a
    drawn point with its numbers."""
    context = browser.new_context(viewport={"width": 1280, "height": 900}, accept_downloads=True)
    page = context.new_page()
    page.goto(f"{corpus_server}/head/{MINILM}/1/2?project=1&ptokens=64&pcolour=activation")
    wait_js(page, "document.querySelector('#pj-plot canvas')", 120)
    assert "HeadVis activation of its row" in page.inner_text("#pj-plot .cloud-bar")
    saved = {}
    for kind in ("png", "svg", "json", "csv"):
        with page.expect_download() as download:
            page.click(f"#pj-export button[data-export={kind}]")
        saved[kind] = tmp_path / download.value.suggested_filename
        download.value.save_as(saved[kind])
        assert saved[kind].name.endswith(f"-L1-H2-projection-qk.{kind}")
    answer = json.loads(saved["json"].read_text())
    assert answer["shown"] == {"plane": "qk", "colour": "activation"}
    n = len(answer["token"])
    firsts = [i for i in range(n) if answer["position"][i] == 0]
    assert firsts and all(answer["activation"][i] is None for i in firsts)
    assert all(t["max_activation"] is not None for t in answer["texts"])
    rows = list(csv.reader(io.StringIO(saved["csv"].read_text())))
    assert rows[0][:2] == ["kind", "token"] and len(rows) == 1 + 2 * n  # queries and keys
    assert [float(v) for v in rows[1][4:6]] == answer["queries"][0]
    svg = saved["svg"].read_text()
    assert f"{MINILM} · layer 1 · head 2" in svg and "coloured by HeadVis activation" in svg
    assert "#c4c4c4" in svg  # position 0's points, grey
    assert saved["png"].read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    page.select_option("#pj-colour", "textmax")
    wait_js(page, "location.search.includes('pcolour=textmax')")
    assert "max_activation" in page.inner_text("#pj-plot .cloud-bar")
    context.close()


@pytest.mark.parametrize("width", [1280, 390])
def test_embed_mode_drops_the_chrome_and_may_be_framed(browser, corpus_server, width):
    context = browser.new_context(viewport={"width": width, "height": 900})
    page = context.new_page()
    errors = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    head = f"{corpus_server}/head/{MINILM}/1/2?embed=1&metric=previous"
    answer = page.goto(head)
    assert "frame-ancestors *" in answer.headers["content-security-policy"]
    assert "x-frame-options" not in answer.headers
    wait_js(page, "document.querySelectorAll('#head-texts .js-plotly-plot').length >= 6", 60)
    assert page.locator("header.topbar, a.skip").count() == 0
    assert page.eval_on_selector("body", "b => b.className") == "embed"
    page.select_option("#head-metric", "entropy")
    wait_js(page, "location.search.includes('metric=entropy')")
    assert "embed=1" in page.url  # the mode is part of the page's state
    assert page.evaluate(FITS)
    assert not serious(page)
    page.goto(f"{corpus_server}/heads/{MINILM}?embed=1&find=previous&min=0.3")
    wait_js(page, "document.querySelector('#heads-scatter')?.data?.length > 0", 60)
    assert page.locator("header.topbar").count() == 0
    assert page.evaluate(FITS)
    assert not serious(page)
    link = page.locator("#heads-found tbody tr a").first
    link.click()
    page.wait_for_url("**/head/**")
    assert "embed=1" in page.url  # a head opened from the embedded scatter stays embedded
    assert not errors
    context.close()


def test_another_site_frames_the_embed_pages_and_not_the_others(browser, corpus_server, tmp_path):
    """A blog on another origin (a local server: Chrome keeps public pages from framing local
    ones) frames the embedded head page; the same page without embed=1 is refused."""
    (tmp_path / "post.html").write_text(
        f'<iframe id="embed" src="{corpus_server}/head/{MINILM}/1/2?embed=1" width="900"></iframe>'
        f'<iframe id="plain" src="{corpus_server}/head/{MINILM}/1/2" width="900"></iframe>'
    )
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(tmp_path))
    blog = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=blog.serve_forever, daemon=True).start()
    host = "localhost" if "127.0.0.1" in corpus_server else "127.0.0.1"  # another origin
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    try:
        page.goto(f"http://{host}:{blog.server_address[1]}/post.html")
        embedded = page.frame_locator("#embed")
        embedded.locator("#head-means .metric").first.wait_for(timeout=60_000)
        assert embedded.locator("#head-title").inner_text().startswith("Layer 1 head 2")
        assert embedded.locator("header.topbar").count() == 0
        refused = page.frame_locator("#plain")
        page.wait_for_timeout(1000)
        assert refused.locator("#head-title").count() == 0  # frame-ancestors 'none'
    finally:
        page.close()
        blog.shutdown()
        blog.server_close()
