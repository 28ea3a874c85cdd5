"""Issue 14.2: the Deep zoom page over a long text: the forward pass's progress, an overview of
blocks, zooming in down to single weights with their tokens, the window kept in the URL."""

import csv
import html
import io
import json
import time
from decimal import ROUND_HALF_UP, Decimal
from urllib.parse import parse_qs, urlencode, urlparse

import pytest

from atlas_engine.models.registry import SMOLLM2_ID
from attention_core.head_stats import DESCRIPTIONS, STATISTICS
from bench.compression import prose
from tests.e2e.helpers import TASK_GUARD_MS, answer_late, export, log_colours, wait_js
from tests.e2e.pages import MINILM, SENTENCE
from tests.e2e.test_long_inputs import LONG_TASKS

pytestmark = [pytest.mark.e2e, pytest.mark.slow]


@pytest.fixture(scope="module")
def long_text():
    from transformers import AutoTokenizer

    from atlas_engine.models.sources import smollm2_folder
    from tests.conftest import CACHE_DIR

    folder = smollm2_folder(CACHE_DIR, lambda *_: None)
    return prose(AutoTokenizer.from_pretrained(folder), 802)  # 800 SmolLM2 tokens


# The finder's table read back exactly: each cell's data-value is JavaScript's String(number).
FINDER_VALUES = """[...document.querySelectorAll('#zoom-heads-grid tbody tr')].map((line) =>
  [...line.querySelectorAll('button')].map((b) => b.dataset.value === '' ? null : Number(b.dataset.value)))"""
FINDER_TEXTS = """[...document.querySelectorAll('#zoom-heads-grid tbody tr')].map((line) =>
  [...line.querySelectorAll('button')].map((b) => b.textContent))"""
FINDER_BOTH = f"[{FINDER_VALUES}, {FINDER_TEXTS}]"  # in one call: a layer may arrive between two


def drawn_window(page) -> str:
    wait_js(page, "document.querySelector('#zoom-window').textContent.startsWith('Layer')", 120)
    return page.inner_text("#zoom-window")


def test_a_long_text_zooms_from_blocks_to_tokens_and_the_url_keeps_the_window(
    page, live_server, long_text
):
    page.add_init_script(LONG_TASKS)
    query = urlencode({"model": SMOLLM2_ID, "layer": 5, "head": 2})
    page.goto(f"{live_server}/zoom?{query}#{urlencode({'text': long_text})}")
    page.wait_for_selector("#zoom-result:not([hidden])", timeout=120_000)
    overview = drawn_window(page)
    assert "Layer 5, head 2" in overview and "largest weight of 3 × 3 tokens" in overview
    assert "800 tokens" in page.inner_text("#zoom-status")
    shape = page.evaluate("(() => { const z = document.querySelector('#zoom-map').data[0].z;"
                          " return [z.length, z[0].length]; })()")  # fmt: skip
    assert shape[0] == shape[1] == 267  # 800 tokens in blocks of 3: at most 320 across

    # Zoom into 20 queries x 20 keys near the end: single weights, tokens on the axes.
    page.evaluate("window.__long = []")
    page.evaluate(
        "Plotly.relayout(document.querySelector('#zoom-map'),"
        " {'xaxis.range': [699.5, 719.5], 'yaxis.range': [739.5, 719.5]})"
    )
    wait_js(page, "document.querySelector('#zoom-window').textContent.includes('one weight')", 60)
    assert "queries 720–739, keys 700–719" in page.inner_text("#zoom-window")
    ticks = page.evaluate("document.querySelector('#zoom-map').layout.xaxis.ticktext")
    tokens = page.evaluate("document.querySelector('#zoom-map').data[0].z.length")
    assert tokens == 20 and len(ticks) == 20
    assert max(page.evaluate("window.__long"), default=0) <= TASK_GUARD_MS

    # The values drawn are the API's for that window, in log colours (800 tokens: over 512).
    body = {"model": SMOLLM2_ID, "text": long_text, "layer": 5, "heads": [2],
            "rows": [720, 740], "cols": [700, 720]}  # fmt: skip
    expected = page.request.post(f"{live_server}/api/attention/tiles", data=body).json()
    drawn = page.evaluate("document.querySelector('#zoom-map').data[0].z")
    assert [z for row in drawn for z in row] == pytest.approx(
        log_colours(expected["values"][0]), abs=1e-12
    )

    assert "win=720%2C740%2C700%2C720" in page.url
    page.reload()
    wait_js(page, "document.querySelector('#zoom-window').textContent.includes('one weight')", 120)
    assert "queries 720–739, keys 700–719" in page.inner_text("#zoom-window")

    # The keyboard: - zooms out by 2 around the centre, an arrow moves by a quarter.
    page.focus("#zoom-map")
    page.keyboard.press("-")
    wait_js(page, "document.querySelector('#zoom-window').textContent.includes('710–749')", 60)
    assert "keys 690–729" in page.inner_text("#zoom-window")
    page.keyboard.press("ArrowRight")
    wait_js(page, "document.querySelector('#zoom-window').textContent.includes('keys 700–739')")
    assert page.inner_text("#zoom-error") == ""


def test_log_colours_draw_each_weights_log10_from_a_millionth_and_the_url_keeps_them(
    page, live_server, long_text
):
    window = [20, 60, 0, 40]  # single weights: the first key (a sink) and masked keys among them
    query = urlencode({"model": SMOLLM2_ID, "layer": 3, "head": 1, "colours": "log",
                       "win": ",".join(map(str, window))})  # fmt: skip
    page.goto(f"{live_server}/zoom?{query}#{urlencode({'text': long_text})}")
    assert "one weight" in drawn_window(page)
    assert page.input_value("#zoom-colours") == "log"
    body = {"model": SMOLLM2_ID, "text": long_text, "layer": 3, "heads": [1],
            "rows": window[:2], "cols": window[2:]}  # fmt: skip
    weights = page.request.post(f"{live_server}/api/attention/tiles", data=body).json()
    weights = weights["values"][0]
    drawn = page.evaluate("document.querySelector('#zoom-map').data[0]")
    assert (drawn["zmin"], drawn["zmax"]) == (-6, 0)
    flat = [w for row in weights for w in row]
    assert min(flat) == 0 and max(flat) > 0.1  # masked keys, and a sink, in the window
    expected = log_colours(weights)
    assert [z for row in drawn["z"] for z in row] == pytest.approx(expected, abs=1e-12)
    assert drawn["colorbar"]["ticktext"] == ["10⁻⁶", "10⁻⁵", "10⁻⁴", "10⁻³", "10⁻²", "10⁻¹", "1"]

    page.select_option("#zoom-colours", "linear")
    wait_js(page, "document.querySelector('#zoom-map').data[0].zmax === undefined")
    assert page.evaluate("document.querySelector('#zoom-map').data[0].z") == weights
    # Chosen, so said: without it this text, of more than 512 tokens, would open in log colours.
    assert "colours=linear" in urlparse(page.url).query
    page.select_option("#zoom-colours", "log")
    wait_js(page, "document.querySelector('#zoom-map').data[0].zmax === 0")
    assert "colours=log" in urlparse(page.url).query
    assert page.inner_text("#zoom-error") == ""


def test_the_window_shown_exports_its_values_labelled_by_position(page, live_server, long_text):
    window = [20, 60, 0, 40]
    query = urlencode({"model": SMOLLM2_ID, "layer": 3, "head": 1, "colours": "log",
                       "win": ",".join(map(str, window))})  # fmt: skip
    page.goto(f"{live_server}/zoom?{query}#{urlencode({'text': long_text})}")
    assert "one weight" in drawn_window(page)
    body = {"model": SMOLLM2_ID, "text": long_text, "layer": 3, "heads": [1],
            "rows": window[:2], "cols": window[2:]}  # fmt: skip
    tiles = page.request.post(f"{live_server}/api/attention/tiles", data=body).json()
    weights = tiles["values"][0]
    tokens = page.evaluate("document.querySelector('#zoom-map').layout.xaxis.ticktext")

    name, saved = export(page, "json")
    data = json.loads(saved)
    assert name == "HuggingFaceTB-SmolLM2-135M-Instruct-L3-H1-q20-59-k0-39.json"
    assert data["values"] == weights and data["layer"] == 3 and data["head"] == 1
    assert (data["rows"], data["cols"], data["cell"], data["reduce"]) == (
        [20, 60],
        [0, 40],
        1,
        None,
    )
    assert data["error_bound"] == tiles["error_bound"] and data["text"] == long_text
    assert [label.split(" ", 1)[0] for label in data["tokens"]] == [str(i) for i in range(40)]
    assert [label.split(" ", 1)[1] for label in data["tokens"]] == [
        html.unescape(token) for token in tokens
    ]
    assert data["row_tokens"][0].startswith("20 ") and len(data["row_tokens"]) == 40

    _, saved = export(page, "csv")
    table = list(csv.reader(io.StringIO(saved.decode("utf-8"))))
    assert table[0][:2] == ["query \\ key", data["tokens"][0]] and len(table) == 41
    assert [[float(v) for v in row[1:]] for row in table[1:]] == weights

    _, saved = export(page, "svg")  # 40 tokens a side: a rectangle a weight
    assert saved.count(b"<rect") >= 40 * 40 and b"<image" not in saved
    name, saved = export(page, "png")
    assert name.endswith("-L3-H1-q20-59-k0-39.png") and saved[:8] == b"\x89PNG\r\n\x1a\n"

    # The whole map: blocks of 3 × 3 tokens, each its largest weight, labelled by their range.
    page.click("#zoom-reset")
    wait_js(page, "document.querySelector('#zoom-window').textContent.includes('3 × 3')", 60)
    name, saved = export(page, "json")
    data = json.loads(saved)
    assert name.endswith("-L3-H1-q0-799-k0-799-max-of-3.json")
    assert (data["cell"], data["reduce"], len(data["values"])) == (3, "max", 267)
    assert data["tokens"][:2] == ["0–2", "3–5"] and data["tokens"][-1] == "798–799"
    assert page.inner_text("#zoom-error") == ""


def test_a_head_opens_in_deep_zoom_from_the_explorer_and_back_with_the_same_weights(
    page, live_server
):
    query = urlencode({"model": MINILM, "text": SENTENCE, "layer": 2, "head": 3, "colours": "log"})
    page.goto(f"{live_server}/?{query}")
    wait_js(page, "document.querySelector('#heatmap')?.data?.[0]?.zmax === 0", 60)
    shown = page.evaluate("document.querySelector('#heatmap').data[0].customdata")
    link = page.locator("#view-heatmap [data-part=deepZoom]")
    assert link.is_visible()
    target = urlparse(link.get_attribute("href"))
    assert parse_qs(target.query) == {
        "model": [MINILM],
        "layer": ["2"],
        "head": ["3"],
        "colours": ["log"],
    }
    assert parse_qs(target.fragment) == {"text": [SENTENCE]}  # never sent to the server

    link.click()
    assert "Layer 2, head 3" in drawn_window(page) and "one weight" in drawn_window(page)
    assert page.input_value("#zoom-colours") == "log"
    page.select_option("#zoom-colours", "linear")  # z: the weights themselves
    wait_js(page, "document.querySelector('#zoom-map').data[0].zmax === undefined")
    replayed = page.evaluate("document.querySelector('#zoom-map').data[0].z")
    worst = max(
        abs(a - b)
        for ra, rb in zip(shown, replayed, strict=True)
        for a, b in zip(ra, rb, strict=True)
    )
    assert worst <= 1e-5  # the error bound Deep zoom states for its replay

    # Back: the explorer opens the head Deep zoom shows, here after moving to head 4.
    page.select_option("#zoom-head", "4")
    wait_js(
        page, "document.querySelector('#zoom-window').textContent.startsWith('Layer 2, head 4')"
    )
    page.click("#zoom-explorer")
    wait_js(page, "document.querySelector('#heatmap')?.data?.[0]?.zmax === 1", 60)
    assert "layer 2 · head 4" in page.evaluate(
        "document.querySelector('#heatmap').layout.title.text"
    )
    assert page.input_value("#text") == SENTENCE
    assert not page.errors


# The whole map's plot area (the drag surface over it) and colour bar, and the colours drawn.
MAP_DRAWN = """(() => {
  const map = document.querySelector('#zoom-map');
  const box = (selector) => {
    const r = map.querySelector(selector).getBoundingClientRect();
    return { left: r.left, right: r.right, width: r.width, height: r.height };
  };
  return { area: box('.nsewdrag'), bar: box('.colorbar'), zmin: map.data[0].zmin };
})()"""


@pytest.mark.parametrize("width, height", [(1280, 800), (390, 844)])
def test_a_long_text_opens_in_log_colours_with_square_cells_unless_the_link_chose(
    browser, live_server, long_text, width, height
):
    """800 tokens, more than the explorer's 512: in linear colours a row's weights spread over
    so many keys that the map reads as one colour, so it opens in log colours; the map's cells
    are square (the whole map a square) with its colour bar beside it, at either width."""
    context = browser.new_context(viewport={"width": width, "height": height})
    try:
        page = context.new_page()
        fragment = urlencode({"text": long_text})
        page.goto(f"{live_server}/zoom?{urlencode({'model': SMOLLM2_ID})}#{fragment}")
        drawn_window(page)
        assert page.input_value("#zoom-colours") == "log"
        assert "colours" not in urlparse(page.url).query  # the length chose, not the link
        drawn = page.evaluate(MAP_DRAWN)
        assert drawn["zmin"] == -6
        assert drawn["area"]["width"] == pytest.approx(drawn["area"]["height"], abs=2)
        assert 0 <= drawn["bar"]["left"] - drawn["area"]["right"] <= 30
        assert drawn["bar"]["right"] <= width

        query = urlencode({"model": SMOLLM2_ID, "colours": "linear"})
        page.goto(f"{live_server}/zoom?{query}#{fragment}")
        drawn_window(page)
        assert page.input_value("#zoom-colours") == "linear"
        assert page.evaluate(MAP_DRAWN)["zmin"] == 0
    finally:
        context.close()


def test_a_short_text_opens_in_linear_colours_and_the_note_says_deep_zooms_own_limit(
    page, live_server
):
    """The model note states what Deep zoom takes with the chosen model: its whole context
    (SmolLM2's 8,192 tokens, MiniLM's 512), not the explorer's limit."""
    query = urlencode({"model": MINILM})
    page.goto(f"{live_server}/zoom?{query}#{urlencode({'text': SENTENCE})}")
    drawn_window(page)
    assert page.input_value("#zoom-colours") == "linear"
    assert page.evaluate(MAP_DRAWN)["zmin"] == 0
    models = {m["id"]: m for m in page.request.get(f"{live_server}/api/models").json()["models"]}
    for model in (MINILM, SMOLLM2_ID):
        page.select_option("#zoom-model", model)
        limit = models[model]["max_tokens"]
        assert page.inner_text("#zoom-model-note") == (
            f"{models[model]['description']} Deep zoom takes texts of up to {limit:,} tokens with it."
        )
    assert "8,192 tokens" in page.inner_text("#zoom-model-note")
    assert not page.errors


def test_deep_zoom_offers_the_explorer_only_for_texts_its_views_take(page, live_server, long_text):
    query = urlencode({"model": SMOLLM2_ID, "win": "0,40,0,40"})
    page.goto(f"{live_server}/zoom?{query}#{urlencode({'text': long_text})}")
    drawn_window(page)  # 800 tokens: over the explorer's 512
    assert page.locator("#zoom-explorer").is_hidden()


def test_find_matches_a_phrase_across_tokens_whatever_the_tokenizer_marks(page, live_server):
    page.goto(f"{live_server}/zoom")
    found = page.evaluate("""async () => {
      const { aroundMatch, findTokens } = await import('/static/js/pages/zoom-find.js');
      return {
        wordpiece: findTokens(['[CLS]', 'the', 'animal', '##s', 'ran', '[SEP]'], 'Animals  ran'),
        bpe: findTokens(['The', '␣cat', '␣sat', '↵', 'the', '␣cat', 'cat'], 'the cat'),
        inside: findTokens(['␣concatenate'], 'cat'),
        blank: findTokens(['a', 'b'], '  '),
        astral: findTokens(['😀', 'x', '😀', 'x'], '😀x'),
        start: aroundMatch({ first: 3, last: 5 }, 100, 64),
        end: aroundMatch({ first: 98, last: 99 }, 100, 64),
        short: aroundMatch({ first: 2, last: 2 }, 10, 64),
      };
    }""")
    assert found["wordpiece"] == [{"first": 2, "last": 4}]
    assert found["bpe"] == [{"first": 0, "last": 1}, {"first": 4, "last": 5}]
    assert found["inside"] == [{"first": 0, "last": 0}]
    assert found["blank"] == []
    assert found["astral"] == [{"first": 0, "last": 1}, {"first": 2, "last": 3}]
    assert found["start"] == [0, 64, 0, 64] and found["end"] == [36, 100, 36, 100]
    assert found["short"] == [0, 10, 0, 10]


def test_find_marks_a_phrase_on_the_map_and_zooms_to_each_match(page, live_server, long_text):
    phrase = "Attention"  # the README's prose says it often
    squeezed = "".join(long_text.split()).lower()
    expected = squeezed.count("attention")  # not overlapping, whitespace and case aside
    assert expected >= 2
    query = urlencode({"model": SMOLLM2_ID, "layer": 5, "head": 2})
    page.goto(f"{live_server}/zoom?{query}#{urlencode({'text': long_text})}")
    drawn_window(page)
    page.fill("#zoom-find", phrase)
    page.press("#zoom-find", "Enter")
    wait_js(page, "document.querySelector('#zoom-map').layout.shapes?.length > 0")
    shapes = page.evaluate("document.querySelector('#zoom-map').layout.shapes")
    assert len(shapes) == 2 * expected  # each match's keys and queries
    assert f"{expected} matches of “Attention”" in page.inner_text("#zoom-find-status")
    assert parse_qs(urlparse(page.url).fragment)["find"] == [phrase]

    buttons = page.locator("#zoom-find-list button")
    assert buttons.count() == min(expected, 12)
    label = buttons.first.inner_text()  # "token 3: ␣attention", the tokens as text
    where, spelled = label.split(": ", 1)
    first, _, last = where.split(" ")[1].partition("–")
    first, last = int(first), int(last or first)
    assert "attention" in "".join(spelled.replace("␣", " ").split()).lower()
    columns = [(s["x0"], s["x1"]) for s in shapes if s["yref"] == "y domain"]
    assert columns[0] == (first - 0.5, last + 0.5)

    buttons.first.click()  # 64 tokens a side around the match's last token
    start = max(0, min(800 - 64, last - 32))
    span = f"queries {start}–{start + 63}, keys {start}–{start + 63}"
    wait_js(page, f"document.querySelector('#zoom-window').textContent.includes('{span}')", 60)
    assert "one weight" in page.inner_text("#zoom-window")
    page.reload()  # the search comes back with the text
    wait_js(page, "document.querySelector('#zoom-map')?.layout?.shapes?.length > 0", 120)
    assert page.input_value("#zoom-find") == phrase
    assert page.inner_text("#zoom-error") == ""


def test_every_heads_statistics_fill_in_layer_by_layer_and_open_the_head(
    page, live_server, long_text
):
    """Over the whole-map limit, the head finder asks /heads a layer at a time: the map it
    fills equals the API's statistics of the whole text, the strongest head opens its map,
    and the statistic in the URL brings the finder back on reload."""
    page.add_init_script(LONG_TASKS)
    query = urlencode({"model": SMOLLM2_ID, "layer": 0, "head": 0})
    page.goto(f"{live_server}/zoom?{query}#{urlencode({'text': long_text})}")
    drawn_window(page)
    # Before any run the statistic can be chosen, and the page says what it measures.
    options = page.eval_on_selector_all("#zoom-stat option", "os => os.map(o => o.value)")
    assert options == list(STATISTICS)
    assert page.input_value("#zoom-stat") == "induction"
    assert page.inner_text("#zoom-heads-describe") == f"induction: {DESCRIPTIONS['induction']}."
    page.evaluate("window.__long = []")
    page.click("#zoom-heads-run")
    finished = "document.querySelector('#zoom-heads-status').textContent.startsWith('Every head')"
    wait_js(page, finished, 240)
    assert "30 layers over 800 tokens" in page.inner_text("#zoom-heads-status")
    assert max(page.evaluate("window.__long"), default=0) <= TASK_GUARD_MS
    page.select_option("#zoom-stat", "previous")
    wait_js(page, "location.search.includes('stat=previous')")
    wait_js(
        page, "document.querySelector('#zoom-heads-describe').textContent.startsWith('previous')"
    )

    body = {"model": SMOLLM2_ID, "text": long_text}
    expected = page.request.post(f"{live_server}/api/attention/heads", data=body).json()
    drawn = page.evaluate(FINDER_VALUES)
    assert drawn == expected["statistics"]["previous"]
    flat = [(v, layer, h) for layer, row in enumerate(drawn) for h, v in enumerate(row)]
    _, layer, head = max(flat)
    first = page.locator("#zoom-heads-top li button").first
    assert first.inner_text().startswith(f"Layer {layer}, head {head}: previous")
    first.click()
    wait_js(
        page,
        f"document.querySelector('#zoom-window').textContent.startsWith('Layer {layer}, head {head}:')",
        60,
    )
    assert f"layer={layer}&head={head}" in page.url
    assert page.evaluate("document.activeElement.id") == "zoom-map"

    page.reload()
    wait_js(page, finished, 240)  # the statistic in the URL runs the finder again
    assert page.input_value("#zoom-stat") == "previous"
    assert page.evaluate(FINDER_VALUES) == drawn
    assert page.inner_text("#zoom-error") == ""


def assert_same_shares(drawn: list, answered: list) -> None:
    """The finder's table against an API answer for the same marked tokens: null where it is
    null, else within the replay's 1e-5 (the API may read the rows in other blocks once the
    statistics are kept, which can move the sixth decimal)."""
    assert len(drawn) == len(answered)
    for row, expected in zip(drawn, answered, strict=True):
        assert [v is None for v in row] == [v is None for v in expected]
        assert [v for v in row if v is not None] == pytest.approx(
            [v for v in expected if v is not None], abs=1e-5
        )


def three_layers_in(page, sent: list, timeout: float = 120) -> None:
    """Waits until the finder asks for its fourth layer: the first three are in its table."""
    deadline = time.monotonic() + timeout
    while len(sent) < 4:
        assert time.monotonic() < deadline, f"{len(sent)} layers asked for in {timeout} s"
        page.wait_for_timeout(20)


def test_the_found_tokens_share_of_every_head_fills_the_finder(page, live_server, long_text):
    """With "attention" found, computing the statistics sends its tokens as `marked`: the
    finder shows each head's share on them, equal to the API's, named for the search."""
    fragment = urlencode({"text": long_text, "find": "attention"})
    page.goto(f"{live_server}/zoom?{urlencode({'model': SMOLLM2_ID})}#{fragment}")
    drawn_window(page)
    wait_js(page, "document.querySelector('#zoom-find-status').textContent.includes('matches')")
    sent = []
    page.on(
        "request",
        lambda r: sent.append(r.post_data_json) if r.url.endswith("/api/attention/heads") else 0,
    )
    page.click("#zoom-heads-run")
    three_layers_in(page, sent)
    page.click("#zoom-heads-stop")
    wait_js(page, "document.querySelector('#zoom-heads-status').textContent.startsWith('Stopped')")
    assert page.input_value("#zoom-stat") == "marked"
    assert "the found tokens (“attention”)" in page.inner_text("#zoom-stat")
    assert page.inner_text("#zoom-heads-describe").startswith("share on “attention”: ")

    # The positions sent: runs of tokens that spell "attention", as many as the text has.
    marked = sent[0]["marked"]
    assert all(body["marked"] == marked for body in sent)
    tokens = page.request.post(
        f"{live_server}/api/attention/heads",
        data={"model": SMOLLM2_ID, "text": long_text, "layers": [0]},
    ).json()["tokens"]
    runs = [[marked[0]]]
    for position in marked[1:]:
        if position == runs[-1][-1] + 1:
            runs[-1].append(position)
        else:
            runs.append([position])
    spelled = ["".join(tokens[i] for i in run).replace("␣", "").lower() for run in runs]
    assert all("attention" in word for word in spelled), spelled
    assert len(runs) == "".join(long_text.split()).lower().count("attention")

    body = {"model": SMOLLM2_ID, "text": long_text, "layers": [0, 1, 2], "marked": marked}
    expected = page.request.post(f"{live_server}/api/attention/heads", data=body).json()
    assert_same_shares(page.evaluate(FINDER_VALUES)[:3], expected["statistics"]["marked"])

    # Read from the last token instead: measured again, that row only, and kept in the URL.
    sent.clear()
    page.select_option("#zoom-read-from", "last")
    three_layers_in(page, sent)
    page.click("#zoom-heads-stop")
    wait_js(page, "document.querySelector('#zoom-heads-status').textContent.startsWith('Stopped')")
    assert sent[0]["read_from"] == [len(tokens) - 1] and sent[0]["marked"] == marked
    assert "from=last" in page.url
    assert "from the last token" in page.inner_text("#zoom-heads-describe")
    expected = page.request.post(
        f"{live_server}/api/attention/heads", data=body | {"read_from": [len(tokens) - 1]}
    ).json()
    assert_same_shares(page.evaluate(FINDER_VALUES)[:3], expected["statistics"]["marked"])

    # The link brings it all back: the search, the rows, and the statistic, for every layer.
    assert "stat=marked" in page.url
    page.reload()
    finished = "document.querySelector('#zoom-heads-status').textContent.startsWith('Every head')"
    wait_js(page, finished, 240)
    assert page.input_value("#zoom-stat") == "marked"
    assert page.input_value("#zoom-read-from") == "last"
    every = body | {"layers": list(range(30)), "read_from": [len(tokens) - 1]}
    expected = page.request.post(f"{live_server}/api/attention/heads", data=every).json()
    assert_same_shares(page.evaluate(FINDER_VALUES), expected["statistics"]["marked"])
    assert page.inner_text("#zoom-error") == ""


def test_the_head_finder_writes_each_layer_as_it_arrives_and_can_be_stopped(
    page, live_server, long_text
):
    """Each layer's values are written in their cells as the layer arrives (2 decimals, as
    JavaScript's toFixed rounds), a layer not computed reads "–" (not "−∞", a masked score); Stop
    keeps what came. The arrow keys move between cells and Enter opens a head's map."""
    query = urlencode({"model": SMOLLM2_ID, "layer": 0, "head": 0})
    page.goto(f"{live_server}/zoom?{query}#{urlencode({'text': long_text})}")
    drawn_window(page)
    page.route("**/api/attention/heads", answer_late(0.4))  # time to look between layers
    page.click("#zoom-heads-run")
    wait_js(page, f"{FINDER_VALUES}.filter((row) => row[0] !== null).length >= 2")
    assert page.is_visible("#zoom-heads-stop")
    _assert_written(*page.evaluate(FINDER_BOTH))
    page.click("#zoom-heads-stop")
    wait_js(page, "document.querySelector('#zoom-heads-status').textContent.startsWith('Stopped')")
    values, texts = page.evaluate(FINDER_BOTH)
    done = [layer for layer, row in enumerate(values) if row[0] is not None]
    assert 2 <= len(done) < len(values)
    _assert_written(values, texts)
    assert page.is_enabled("#zoom-heads-run") and page.is_hidden("#zoom-heads-stop")

    current = "#zoom-heads-grid button[aria-current='true']"
    assert page.get_attribute(current, "data-row") == "0"  # the open head, outlined
    assert page.get_attribute(current, "data-col") == "0"
    page.focus(current)
    page.keyboard.press("ArrowDown")
    page.keyboard.press("ArrowRight")
    page.keyboard.press("Enter")
    wait_js(
        page, "document.querySelector('#zoom-window').textContent.startsWith('Layer 1, head 1:')"
    )
    assert "layer=1&head=1" in page.url
    assert page.evaluate("document.activeElement.id") == "zoom-map"
    assert page.get_attribute(current, "data-row") == "1"


def _assert_written(values: list, texts: list) -> None:
    for row, written in zip(values, texts, strict=True):
        assert written == ["–" if v is None else _to_fixed(v, 2) for v in row]


def _to_fixed(value: float, digits: int) -> str:
    """JavaScript's Number.toFixed: the exact double rounded, a tie away from zero."""
    return str(Decimal(value).quantize(Decimal(1).scaleb(-digits), rounding=ROUND_HALF_UP))


def test_the_forward_pass_shows_progress_and_can_be_stopped(page, live_server, long_text):
    page.goto(f"{live_server}/zoom?{urlencode({'model': SMOLLM2_ID})}")
    wait_js(page, "document.querySelector('#zoom-model').options.length > 0")
    page.fill("#zoom-text", long_text + " Another ending, so the pass is not cached.")
    page.click("#zoom-run")
    wait_js(page, "document.querySelector('#zoom-status').textContent.includes('Forward pass')", 60)
    assert page.is_visible("#zoom-progress") and page.is_visible("#zoom-stop")
    page.click("#zoom-stop")
    wait_js(page, "document.querySelector('#zoom-status').textContent === 'Stopped.'")
    assert page.is_hidden("#zoom-result") and page.inner_text("#zoom-error") == ""


def test_the_explorer_sends_a_text_longer_than_its_views_take_to_deep_zoom(
    page, live_server, long_text
):
    page.goto(f"{live_server}/?{urlencode({'model': SMOLLM2_ID, 'text': long_text})}")
    page.wait_for_selector("#run-notice:not([hidden])", timeout=120_000)
    notice = page.inner_text("#run-notice")
    assert "800 tokens" in notice and "up to 512 tokens" in notice
    assert page.is_hidden("#result")
    page.click("#run-notice a")
    page.wait_for_selector("#zoom-result:not([hidden])", timeout=120_000)
    assert "from the server's cache" in page.inner_text("#zoom-status")  # the explorer's pass
    assert "largest weight" in drawn_window(page)


def test_a_statistic_the_finder_does_not_know_falls_back_to_induction(page, live_server):
    """A hand-edited URL (a name no statistic has, one an object inherits) runs the finder on
    the default statistic, with no error."""
    query = urlencode({"model": SMOLLM2_ID, "stat": "constructor"})
    page.goto(f"{live_server}/zoom?{query}#{urlencode({'text': 'The cat sat. The cat sat.'})}")
    finished = "document.querySelector('#zoom-heads-status').textContent.startsWith('Every head')"
    wait_js(page, finished, 60)
    assert page.input_value("#zoom-stat") == "induction"
    assert page.inner_text("#zoom-heads-describe").startswith(
        f"induction: {DESCRIPTIONS['induction']}."
    )
    assert "stat=induction" in page.url
    assert not page.errors, page.errors


def test_the_long_test_text_offers_only_what_the_model_takes(page, live_server):
    """Issue 49.2: 250 × 2 by default where it fits; a length the model cannot take is shown
    disabled with why, before any click; the text chosen runs without a refusal."""
    page.goto(f"{live_server}/zoom?model={MINILM}")
    wait_js(page, "document.querySelector('#zoom-example-length').options.length > 1")
    options = page.eval_on_selector_all(
        "#zoom-example-length option", "os => os.map((o) => [o.value, o.disabled, o.textContent])"
    )
    assert page.eval_on_selector("#zoom-example-length", "s => s.value") == "250"
    assert [value for value, disabled, _ in options if not disabled] == ["100", "250"]
    assert all(text.endswith("(too long)") for _, disabled, text in options if disabled)
    why = page.inner_text("#zoom-example-why")
    assert why == "1,000 × 2 and 2,000 × 2 need 2,002 and 4,002 tokens; this model takes 512."
    page.click("#zoom-example")
    wait_js(page, "!document.querySelector('#zoom-result').hidden", 120)
    assert page.locator("#zoom-error").is_hidden()
    page.select_option("#zoom-model", SMOLLM2_ID)
    enabled = page.eval_on_selector_all(
        "#zoom-example-length option:not([disabled])", "os => os.map((o) => o.value)"
    )
    assert enabled == ["100", "250", "1000", "2000"]
    assert page.eval_on_selector("#zoom-example-length", "s => s.value") == "250"
