"""The explorer and lab pages in a real browser, against a live server."""

import json
import urllib.parse
import urllib.request

import pytest

from tests.e2e.helpers import click_view, log_colours, wait_js
from tests.support.live import start_server

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

MINILM = "sentence-transformers/all-MiniLM-L6-v2"
SMOLLM2 = "HuggingFaceTB/SmolLM2-135M-Instruct"
SENTENCE = "The animal didn't cross the street because it was tired."


def api_attention(base, **body):
    request = urllib.request.Request(
        f"{base}/api/attention",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=60) as response:
        return json.loads(response.read())


def assert_same_matrix(got, expected, tol=1e-7):
    assert len(got) == len(expected)
    for got_row, expected_row in zip(got, expected, strict=True):
        assert got_row == pytest.approx(expected_row, abs=tol)


# Sets window.__ranNow once the status line says a run has answered ("16 tokens · ...").
RAN_NOW = """() => {
  window.__ranNow = false;
  const status = document.querySelector('#run-status');
  new MutationObserver(() => { if (/^\\d+ tokens/.test(status.textContent)) window.__ranNow = true; })
    .observe(status, {childList: true, characterData: true, subtree: true});
}"""


OPENING_RUN_ENDED = """/^\\d+ tokens/.test(document.querySelector('#run-status').textContent)
  && !document.querySelector('#run').disabled"""


def run_sentence(page, base, text=SENTENCE, model=MINILM, navigate=True):
    if navigate:
        page.goto(f"{base}/?layer=0&head=0")  # the head these tests read, not the clearest one
        wait_js(page, "document.querySelectorAll('#model option').length > 1")
    # The page runs its link (the example) on opening, with Run disabled until it is answered,
    # and Playwright's click waits for Run: let that run end first, so that the answer awaited
    # below is this run's own (under load the opening run ended after RAN_NOW started watching).
    wait_js(page, OPENING_RUN_ENDED, 90)
    page.select_option("#model", model)
    page.fill("#text", text)
    page.evaluate(RAN_NOW)
    page.click("#run")
    wait_js(page, "window.__ranNow", 90)
    page.wait_for_selector("#result:not([hidden])", timeout=90_000)


def wait_for_plot(page, selector):
    wait_js(page, f"document.querySelector('{selector}').data.length > 0")


def test_heatmap_shows_the_api_numbers_and_keyboard_moves(page, live_server):
    run_sentence(page, live_server)
    wait_for_plot(page, "#heatmap")
    expected = api_attention(live_server, model=MINILM, text=SENTENCE, layers=[0], heads=[0])
    z = page.evaluate("document.querySelector('#heatmap').data[0].z")
    assert_same_matrix(z, expected["attentions"][0][0])
    # Hover one cell: the tooltip shows the tokens and the exact weight.
    q, k = 3, 2
    page.evaluate(f"Plotly.Fx.hover(document.querySelector('#heatmap'), {{xval: {k}, yval: {q}}})")
    hover = page.text_content("#heatmap .hoverlayer")
    assert f"{expected['attentions'][0][0][q][k]:.6f}" in hover
    assert expected["tokens"][q] in hover and expected["tokens"][k] in hover

    page.focus("#views")
    page.keyboard.press("ArrowRight")
    page.keyboard.press("ArrowRight")
    page.keyboard.press("ArrowDown")
    wait_js(page, "document.querySelector('#head').value === '2'")
    assert page.input_value("#layer") == "1"
    params = urllib.parse.parse_qs(urllib.parse.urlparse(page.url).query)
    assert params["layer"] == ["1"] and params["head"] == ["2"]
    wait_js(
        page, "document.querySelector('#heatmap').layout.title.text.includes('layer 1 · head 2')"
    )
    expected = api_attention(live_server, model=MINILM, text=SENTENCE, layers=[1], heads=[2])
    z = page.evaluate("document.querySelector('#heatmap').data[0].z")
    assert_same_matrix(z, expected["attentions"][0][0])
    assert not page.errors


def test_log_colours_draw_log10_of_the_weights_and_hovering_still_reads_the_weight(
    page, live_server
):
    run_sentence(page, live_server)
    wait_for_plot(page, "#heatmap")
    page.select_option("#view-heatmap [data-part=colours]", "log")
    wait_js(page, "document.querySelector('#heatmap').data[0].zmax === 0")
    assert urllib.parse.parse_qs(urllib.parse.urlparse(page.url).query)["colours"] == ["log"]
    weights = api_attention(live_server, model=MINILM, text=SENTENCE, layers=[0], heads=[0])
    weights = weights["attentions"][0][0]
    drawn = page.evaluate("document.querySelector('#heatmap').data[0]")
    assert_same_matrix(drawn["customdata"], weights)  # the weights, as the map holds them
    expected = log_colours(drawn["customdata"])
    assert [z for row in drawn["z"] for z in row] == pytest.approx(expected, abs=1e-12)
    q, k = 3, 2
    page.evaluate(f"Plotly.Fx.hover(document.querySelector('#heatmap'), {{xval: {k}, yval: {q}}})")
    assert f"{weights[q][k]:.6f}" in page.text_content("#heatmap .hoverlayer")
    # Reloaded, the URL brings the log colours back; linear again, z is the weights.
    page.reload()
    wait_js(page, "document.querySelector('#heatmap')?.data?.[0]?.zmax === 0", 60)
    assert page.input_value("#view-heatmap [data-part=colours]") == "log"
    page.select_option("#view-heatmap [data-part=colours]", "linear")
    wait_js(page, "document.querySelector('#heatmap').data[0].zmax === 1")
    assert_same_matrix(page.evaluate("document.querySelector('#heatmap').data[0].z"), weights)
    assert "colours" not in urllib.parse.urlparse(page.url).query
    assert not page.errors


def drawn_in_log_colours(page, selector: str) -> list:
    """The weights a chart drawn in log colours holds (its customdata), once its z is checked
    to be their log10 from 10^-6."""
    drawn = page.evaluate(f"document.querySelector('{selector}').data[0]")
    assert (drawn["zmin"], drawn["zmax"]) == (-6, 0), selector
    flat = [z for row in drawn["z"] for z in row]
    assert flat == pytest.approx(log_colours(drawn["customdata"]), abs=1e-12), selector
    return drawn["customdata"]


def test_log_colours_hold_in_every_view_of_weights_and_the_signed_difference_stays_linear(
    page, live_server
):
    query = urllib.parse.urlencode({"text": SENTENCE, "view": "follow", "colours": "log"})
    page.goto(f"{live_server}/?{query}")
    follow = [
        "#follow-query-layers",
        "#follow-key-layers",
        "#follow-query-heads",
        "#follow-key-heads",
    ]
    wait_js(page, f"document.querySelector('{follow[-1]}')?.data?.[0]?.zmax === 0", 60)
    assert page.input_value("#view-follow [data-part=colours]") == "log"
    heads = [drawn_in_log_colours(page, chart) for chart in follow][2]
    # Linear from this view's own control: the same weights, drawn as they are.
    page.select_option("#view-follow [data-part=colours]", "linear")
    wait_js(page, "document.querySelector('#follow-key-heads').data[0].zmax === 1")
    assert page.evaluate("document.querySelector('#follow-query-heads').data[0].z") == heads
    assert "colours" not in urllib.parse.urlparse(page.url).query
    # Compare, log chosen there: A and B in log colours, B − A still signed and linear.
    click_view(page, "compare")
    wait_js(page, "document.querySelector('#compare-b').data?.[0]?.zmax === 1", 60)
    page.select_option("#view-compare [data-part=colours]", "log")
    wait_js(page, "document.querySelector('#compare-b').data[0].zmax === 0")
    a, b = (drawn_in_log_colours(page, side) for side in ("#compare-a", "#compare-b"))
    difference = page.evaluate("document.querySelector('#compare-difference').data[0]")
    assert difference["zmid"] == 0 and "customdata" not in difference
    flat = [d for row in difference["z"] for d in row]
    expected = [y - x for ra, rb in zip(a, b, strict=True) for x, y in zip(ra, rb, strict=True)]
    assert flat == pytest.approx(expected, abs=1e-6)
    # The choice is the state's: Average & rollout opens in log colours, rollout too.
    click_view(page, "aggregate")
    wait_js(page, "document.querySelector('#aggregate-map').data?.[0]?.zmax === 0", 60)
    assert page.input_value("#view-aggregate [data-part=colours]") == "log"
    page.select_option("#aggregate-kind", "rollout")
    wait_js(page, "document.querySelector('#aggregate-map').layout.title.text.includes('rollout')")
    drawn_in_log_colours(page, "#aggregate-map")
    # Ablation: the open head as computed and with heads switched off, both in log colours.
    click_view(page, "ablation")
    page.fill("#ablation-heads", "0.1")
    page.dispatch_event("#ablation-heads", "change")
    wait_js(page, "document.querySelector('#ablation-after').data?.[0]?.zmax === 0", 60)
    drawn_in_log_colours(page, "#ablation-before")
    drawn_in_log_colours(page, "#ablation-after")
    assert urllib.parse.parse_qs(urllib.parse.urlparse(page.url).query)["colours"] == ["log"]
    assert not page.errors


def test_a_colour_scale_the_heatmap_does_not_have_is_not_read_from_the_url(page, live_server):
    query = urllib.parse.urlencode({"text": SENTENCE, "colours": "constructor"})
    page.goto(f"{live_server}/?{query}")
    wait_js(page, "document.querySelector('#heatmap')?.data?.[0]?.zmax === 1", 60)
    assert page.input_value("#view-heatmap [data-part=colours]") == "linear"
    page.select_option("#head", "1")  # the URL is written again from the state: without it
    wait_js(page, "new URLSearchParams(location.search).get('head') === '1'")
    assert "colours" not in urllib.parse.urlparse(page.url).query
    assert not page.errors


def test_all_heads_grid_opens_a_head(page, live_server):
    run_sentence(page, live_server)
    click_view(page, "grid")
    wait_js(
        page,
        "document.querySelector('#grid-status').textContent.includes('72 heads shown')",
        timeout=30,
    )
    assert page.locator("#grid canvas").count() == 72
    page.click("#grid canvas[data-layer='4'][data-head='7']")
    page.wait_for_selector("#view-heatmap:not([hidden])")
    assert (page.input_value("#layer"), page.input_value("#head")) == ("4", "7")
    assert not page.errors


@pytest.fixture
def fresh_server(tmp_path):
    """A server of its own, whose models are not loaded yet (the session's keeps what any
    page loaded before, and the lab's pages load SmolLM2)."""
    server = start_server(tmp_path / "uvicorn.log")
    yield server.base
    server.stop()


def test_decoder_mask_view_is_causal(page, fresh_server):
    page.goto(f"{fresh_server}/")
    wait_js(page, "document.querySelectorAll('#model option').length > 1")
    # Record every status line, to see the loading progress of a model not loaded yet.
    page.evaluate(
        """() => {
          const status = document.querySelector('#run-status');
          window.__statuses = [];
          new MutationObserver(() => window.__statuses.push(status.textContent))
            .observe(status, {childList: true, characterData: true, subtree: true});
        }"""
    )
    run_sentence(page, fresh_server, text="One two three four five", model=SMOLLM2, navigate=False)
    statuses = page.evaluate("window.__statuses")
    assert any(s.startswith(f"Loading {SMOLLM2}") for s in statuses), statuses
    click_view(page, "mask")
    wait_for_plot(page, "#mask-after")
    n = len(page.evaluate("document.querySelector('#mask-after').data[0].z"))
    masked = page.inner_text("#mask-metrics")
    assert str(n * (n - 1) // 2) in masked
    after = page.evaluate("document.querySelector('#mask-after').data[0].z")
    before = page.evaluate("document.querySelector('#mask-before').data[0].z")
    for i in range(n):
        for j in range(i + 1, n):
            assert after[i][j] == 0 and before[i][j] is None
    assert "causal" in page.inner_text("#mask-explain")
    # The grid shows which query heads share a key/value head.
    click_view(page, "grid")
    wait_js(page, "document.querySelector('#grid-status').textContent.includes('270')", timeout=60)
    assert "kv0" in page.inner_text("#grid")
    assert not page.errors


def test_scaling_slider_changes_entropy(page, live_server):
    page.goto(f"{live_server}/lab/scaling")
    page.wait_for_selector("[data-metric='entropy-unscaled']")
    before = page.inner_text("[data-metric='entropy-unscaled'] .value")
    page.eval_on_selector(
        "#dk", "el => { el.value = '11'; el.dispatchEvent(new Event('input', {bubbles: true})); }"
    )
    wait_js(page, "document.querySelector('#dk-value').textContent === '2048'")
    wait_js(
        page,
        f"document.querySelector(\"[data-metric='entropy-unscaled'] .value\").textContent !== '{before}'",
    )
    unscaled = float(page.inner_text("[data-metric='entropy-unscaled'] .value"))
    scaled = float(page.inner_text("[data-metric='entropy-scaled'] .value"))
    assert unscaled < scaled
    assert not page.errors


def test_png_export_and_shared_url_reload(page, live_server, browser):
    run_sentence(page, live_server)
    page.select_option("#layer", "2")
    page.select_option("#head", "5")
    wait_for_plot(page, "#heatmap")
    wait_js(page, "document.querySelector('#heatmap').layout.title.text.includes('head 5')")
    with page.expect_download() as info:
        page.click("[data-export='png']")
    download = info.value
    assert download.suggested_filename.endswith(".png")
    with open(download.path(), "rb") as f:
        assert f.read(8) == b"\x89PNG\r\n\x1a\n"
    with page.expect_download() as info:
        page.click("[data-export='csv']")
    with open(info.value.path(), encoding="utf-8") as f:
        header = f.readline()
    assert header.startswith("query \\ key,[CLS]")

    shared = page.url
    other = browser.new_page()
    other.goto(shared)
    other.wait_for_selector("#result:not([hidden])", timeout=60_000)
    wait_for_plot(other, "#heatmap")
    assert (other.input_value("#layer"), other.input_value("#head")) == ("2", "5")
    assert other.input_value("#text") == SENTENCE
    other.close()


def test_script_in_the_sentence_runs_nothing(page, live_server):
    dialogs = []
    page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
    attack = '<img src=x onerror="window.__pwned=1;alert(1)"><script>window.__pwned=2</script>'
    run_sentence(page, live_server, text=attack, model=SMOLLM2)
    wait_for_plot(page, "#heatmap")
    for tab in ("lines", "qk", "heatmap"):
        click_view(page, tab)
        page.wait_for_timeout(500)
    assert page.evaluate("window.__pwned") is None
    assert dialogs == []
    assert page.locator("#result img, #result script").count() == 0
    chips = page.locator("#tokens .token").all_inner_texts()
    assert "".join(chips).replace("␣", " ") == attack
    labels = page.evaluate("document.querySelector('#heatmap').layout.yaxis.ticktext")
    assert any("&lt;" in label for label in labels)  # escaped for Plotly's label markup
    assert page.input_value("#text") == attack


def test_api_errors_show_next_to_the_input(page, live_server):
    page.goto(f"{live_server}/")
    wait_js(page, "document.querySelectorAll('#model option').length > 1")
    page.fill("#text", "word " * 700)
    page.click("#run")
    # Longer than MiniLM takes: the limit, and a way on (SmolLM2 in Deep zoom); no stale map.
    wait_js(page, "/takes at most 512/.test(document.querySelector('#run-notice').textContent)")
    link = page.locator("#run-notice a")
    assert "Deep zoom with HuggingFaceTB/SmolLM2-135M-Instruct" in link.inner_text()
    assert link.get_attribute("href").startswith("/zoom?model=HuggingFaceTB")
    assert page.locator("#result").is_hidden()
    unavailable = page.locator("#model option[value='gpt2']")
    assert unavailable.is_disabled()
    assert "huggingface-cli download gpt2" in unavailable.get_attribute("title")
