"""Issue 10 in the browser: head roles, search, following a token, aggregates and similarity,
each drawn from the API's numbers, opening heads, kept in the URL and exported."""

import json
import urllib.request
from urllib.parse import parse_qs, urlencode, urlparse

import pytest
import torch

from attention_core.aggregate import attention_rollout
from tests.e2e.helpers import export, wait_js
from tests.e2e.pages import MINILM, SENTENCE, open_view, settle

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

SMOLLM2 = "HuggingFaceTB/SmolLM2-135M-Instruct"
INDUCTION_HEADS = {(17, 3), (17, 4), (17, 5), (18, 6), (18, 7), (20, 6), (23, 2), (23, 7), (24, 4)}


def post(base, path, **body):
    request = urllib.request.Request(
        f"{base}{path}",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=120) as response:
        return json.loads(response.read())


def plotted(page, selector):
    """The z values of a drawn heatmap (nulls kept)."""
    wait_js(page, f"document.querySelector('{selector}').data?.length > 0")
    return page.evaluate(f"document.querySelector('{selector}').data[0].z")


def url_state(page):
    """The page's URL parameters; layer and head 0 are the defaults, left out of the URL."""
    return {"layer": "0", "head": "0"} | {
        k: v[0] for k, v in parse_qs(urlparse(page.url).query).items()
    }


def click_cell(page, selector, row, col):
    """Clicks the centre of heatmap cell (row, col) as a user would."""
    box = page.evaluate(
        f"""(() => {{
        const el = document.querySelector('{selector}');
        el.scrollIntoView({{ block: "start" }});
        const xa = el._fullLayout.xaxis, ya = el._fullLayout.yaxis;
        const r = el.querySelector('.nsewdrag').getBoundingClientRect();
        return [r.left + xa.l2p({col}), r.top + ya.l2p({row})];
    }})()"""
    )
    page.mouse.click(*box)


def test_a_statistic_no_head_has_on_this_text_hides_the_map_and_says_why(page, live_server):
    """Without a repeated token no head has an induction score: the map is not drawn (Plotly
    would drop every layer and head from an all-null map's axes), the summary says why and
    the table reads "–"; a statistic every head has brings the map back."""
    text = "The cat sat on a mat."
    open_view(page, live_server, "explorer:heads", text=text)
    page.select_option("#heads-stat", "induction")
    wait_js(
        page, "document.querySelector('#heads-summary').textContent.includes('No token repeats')"
    )
    assert page.is_hidden("#heads-map")
    cells = page.locator("#heads-table tbody td:last-child").all_inner_texts()
    assert len(cells) == 6 * 12 and set(cells) == {"–"}
    page.select_option("#heads-stat", "previous")
    wait_js(page, "!document.querySelector('#heads-map').hidden")
    api = post(live_server, "/api/attention/heads", model=MINILM, text=text)
    assert plotted(page, "#heads-map") == api["statistics"]["previous"]


def test_head_roles_show_the_api_statistics_and_open_a_head(page, live_server):
    open_view(page, live_server, "explorer:heads", model=SMOLLM2)
    api = post(live_server, "/api/attention/heads", model=SMOLLM2, text=SENTENCE)
    assert plotted(page, "#heads-map") == api["statistics"]["previous"]
    page.select_option("#heads-stat", "first")
    wait_js(page, "document.querySelector('#heads-describe').textContent.startsWith('first')")
    assert plotted(page, "#heads-map") == api["statistics"]["first"]
    assert url_state(page)["stat"] == "first"
    # Sorting the table by 'previous', highest first: SmolLM2's previous-token head leads.
    page.click("#heads-table button[data-sort='-previous']")
    wait_js(page, "document.querySelector('#heads-table caption').textContent.includes('previous')")
    first_row = page.inner_text("#heads-table tbody tr:first-child th")
    assert first_row == "L16 H0" and url_state(page)["sort"] == "-previous"
    assert "previous-token" in page.inner_text("#heads-table tbody tr:first-child td.roles")
    # The sink head's role and score come from the API.
    sink = api["roles"][18][8][0]
    assert sink["role"] == "first-token (sink)"
    click_cell(page, "#heads-map", 18, 8)
    wait_js(page, "!document.querySelector('#view-heatmap').hidden")
    assert (url_state(page)["layer"], url_state(page)["head"]) == ("18", "8")


def test_the_induction_button_finds_smollm2s_induction_heads(page, live_server):
    open_view(page, live_server, "explorer:heads", model=SMOLLM2)
    page.click("#heads-induction")
    wait_js(
        page, "document.querySelector('#heads-describe').textContent.startsWith('induction')", 90
    )
    settle(page)
    text = page.input_value("#text")
    words = text.split()  # every word after a space, the first one too
    assert words[: len(words) // 2] == words[len(words) // 2 :]  # a sequence written twice
    assert url_state(page)["sort"] == "-induction" and url_state(page)["text"] == text
    top = page.inner_text("#heads-table tbody tr:first-child th")
    layer, head = (int(part[1:]) for part in top.split(" "))
    assert (layer, head) in INDUCTION_HEADS
    assert "induction" in page.inner_text("#heads-table tbody tr:first-child td.roles")


def test_search_by_pair_matches_the_maps_and_survives_a_reload(page, live_server):
    open_view(page, live_server, "explorer:search")
    assert "L0 H2" in page.inner_text("#search-results")  # MiniLM's previous-token head
    page.select_option("#search-kind", "pair")
    page.select_option("#search-source", "8")
    page.select_option("#search-target", "0")
    page.fill("#search-above", "0.3")
    page.click("#search-form button[type=submit]")
    wait_js(page, "document.querySelector('#search-summary').textContent.includes('gives token 0')")
    settle(page)
    maps = post(live_server, "/api/attention", model=MINILM, text=SENTENCE)["attentions"]
    expected = sorted(
        ((maps[layer][h][8][0], layer, h) for layer in range(6) for h in range(12)),
        reverse=True,
    )
    expected = [f"L{layer} H{h}" for w, layer, h in expected if w > 0.3]
    shown = page.locator("#search-results tbody th").all_inner_texts()
    assert shown == expected and len(expected) > 0
    assert url_state(page)["find"] == "pair:8:0:0.3"
    page.reload()
    wait_js(
        page, "document.querySelector('#search-summary').textContent.includes('gives token 0')", 90
    )
    assert page.locator("#search-results tbody th").all_inner_texts() == expected
    page.click("#search-results tbody tr:first-child th button")
    wait_js(page, "!document.querySelector('#view-heatmap').hidden")
    layer, head = (int(part[1:]) for part in expected[0].split(" "))
    assert (url_state(page)["layer"], url_state(page)["head"]) == (str(layer), str(head))


def test_search_by_a_span_ranks_every_head_by_its_share_as_the_api_measures_it(page, live_server):
    open_view(page, live_server, "explorer:search", model=SMOLLM2)
    every = post(live_server, "/api/attention/heads", model=SMOLLM2, text=SENTENCE, marked=[1, 2])
    last = len(every["tokens"]) - 1
    from_last = post(
        live_server,
        "/api/attention/heads",
        model=SMOLLM2,
        text=SENTENCE,
        marked=[1, 2],
        read_from=[last],
    )

    def search(read_from):
        page.select_option("#search-kind", "marked")
        page.select_option("#search-marked-first", "2")  # either order: the span is 1-2
        page.select_option("#search-marked-last", "1")
        page.select_option("#search-read-from", read_from)
        page.click("#search-form button[type=submit]")

    def shown_matches(answer, readers):
        wait_js(
            page, f"document.querySelector('#search-summary').textContent.includes('{readers}')"
        )
        settle(page)
        grid = answer["statistics"]["marked"]
        ranked = sorted(
            (-value, layer, head)
            for layer, row in enumerate(grid)
            for head, value in enumerate(row)
        )
        rows = page.locator("#search-results tbody tr")
        assert rows.locator("th").all_inner_texts() == [
            f"L{layer} H{head}" for _, layer, head in ranked
        ]
        shares = [float(text) for text in rows.locator("td:nth-child(2)").all_inner_texts()]
        assert shares == pytest.approx([-value for value, _, _ in ranked], abs=5e-4)
        torch.testing.assert_close(
            torch.tensor(plotted(page, "#search-map")), torch.tensor(grid), atol=1e-6, rtol=0
        )

    summary = "tokens 1–2 “␣animal ␣didn”"
    search("last")
    shown_matches(from_last, "read from the last token")
    assert summary in page.inner_text("#search-summary")
    assert url_state(page)["find"] == "marked:1:2:last"
    assert from_last["statistics"]["marked"] != every["statistics"]["marked"]
    search("later")
    shown_matches(every, "read from every later token")
    assert url_state(page)["find"] == "marked:1:2:later"
    page.reload()
    page.wait_for_selector("#result:not([hidden])", timeout=90_000)
    shown_matches(every, "read from every later token")
    assert page.input_value("#search-kind") == "marked"
    assert page.input_value("#search-marked-first") == "1"


@pytest.mark.parametrize("find", ["marked:9:2:later", "marked:2:99:later", "marked:1:2:sideways"])
def test_a_span_search_the_url_spells_wrong_falls_back_to_the_default_search(
    page, live_server, find
):
    """A reversed span, a token past the text or an unknown reader: the default search runs
    (no request for it is sent) and the form shows it."""
    asked = []
    page.on(
        "request",
        lambda r: asked.append(r.post_data) if r.url.endswith("/api/attention/heads") else None,
    )
    query = urlencode({"model": MINILM, "text": SENTENCE, "view": "search", "find": find})
    page.goto(f"{live_server}/?{query}")
    wait_js(page, "document.querySelector('#search-summary').textContent.includes('role')", 90)
    assert "previous-token" in page.inner_text("#search-summary")
    assert page.input_value("#search-kind") == "role"
    assert not any("marked" in (body or "") for body in asked)


def test_following_a_token_finds_the_heads_that_read_it(page, live_server):
    open_view(page, live_server, "explorer:follow")
    page.select_option("#follow-token", "8")
    settle(page)
    page.click("#follow-find-heads")
    wait_js(page, "!document.querySelector('#view-search').hidden")
    wait_js(page, "document.querySelector('#search-summary').textContent.includes('token 8 ')")
    settle(page)
    assert (url_state(page)["view"], url_state(page)["find"]) == ("search", "marked:8:8:later")
    answer = post(live_server, "/api/attention/heads", model=MINILM, text=SENTENCE, marked=[8])
    grid = answer["statistics"]["marked"]
    best = max(
        (value, -layer, -head) for layer, row in enumerate(grid) for head, value in enumerate(row)
    )
    first = page.inner_text("#search-results tbody tr:first-child th")
    assert first == f"L{-best[1]} H{-best[2]}"
    assert "read from every other token" in page.inner_text("#search-summary")  # an encoder


def test_one_click_on_a_token_follows_it_through_every_layer(page, live_server):
    open_view(page, live_server, "explorer:heatmap", model=SMOLLM2)
    it = page.locator("#tokens .token", has_text="it").first
    index = int(it.get_attribute("data-index"))
    it.click()
    wait_js(page, "!document.querySelector('#view-follow').hidden")
    settle(page)
    assert url_state(page)["view"] == "follow" and url_state(page)["q"] == str(index)
    maps = torch.tensor(
        post(live_server, "/api/attention", model=SMOLLM2, text=SENTENCE)["attentions"]
    )
    mean = torch.tensor(plotted(page, "#follow-query-layers"))
    torch.testing.assert_close(mean, maps[:, :, index, :].mean(dim=1), atol=1e-6, rtol=0)
    every = torch.tensor(plotted(page, "#follow-key-heads"))
    torch.testing.assert_close(every, maps[:, :, :, index].reshape(30 * 9, -1), atol=1e-6, rtol=0)
    page.select_option("#follow-summary", "max")
    wait_js(
        page, "document.querySelector('#follow-query-layers').layout.title.text.includes('largest')"
    )
    largest = torch.tensor(plotted(page, "#follow-query-layers"))
    torch.testing.assert_close(largest, maps[:, :, index, :].amax(dim=1), atol=1e-6, rtol=0)
    _, body = export(page, "json")
    data = json.loads(body)
    assert data["token"] == index and len(data["as_key"]) == 30 and data["summary"] == "max"


def test_rollout_and_head_average_match_the_core_on_the_api_maps(page, live_server):
    query = {"model": MINILM, "text": SENTENCE, "view": "aggregate", "agg": "rollout", "layer": 5}
    page.goto(f"{live_server}/?{urlencode({**query, 'q': 3})}")
    page.wait_for_selector("#view-aggregate:not([hidden])", timeout=90_000)
    settle(page)
    maps = torch.tensor(
        post(live_server, "/api/attention", model=MINILM, text=SENTENCE)["attentions"]
    )
    rolled = attention_rollout(maps)
    torch.testing.assert_close(
        torch.tensor(plotted(page, "#aggregate-map")), rolled[5], atol=1e-6, rtol=0
    )
    feeds = page.evaluate("document.querySelector('#aggregate-feeds').data[0].y")
    torch.testing.assert_close(torch.tensor(feeds), rolled[5, 3], atol=1e-6, rtol=0)
    page.select_option("#aggregate-kind", "average")
    wait_js(page, "document.querySelector('#aggregate-map').layout.title.text.includes('averaged')")
    torch.testing.assert_close(
        torch.tensor(plotted(page, "#aggregate-map")), maps[5].mean(dim=0), atol=1e-6, rtol=0
    )
    name, body = export(page, "csv")
    assert "average-L5" in name and body.decode().startswith("query \\ key,[CLS]")


def test_similarity_marks_gqa_groups_and_opens_heads(page, live_server):
    query = {"model": SMOLLM2, "text": SENTENCE, "view": "similarity", "order": "layer"}
    page.goto(f"{live_server}/?{urlencode(query)}")
    page.wait_for_selector("#view-similarity:not([hidden])", timeout=90_000)
    settle(page)
    api = post(live_server, "/api/attention/similarity", model=SMOLLM2, text=SENTENCE)
    assert plotted(page, "#similarity-map") == api["similarity"]
    boxes = page.evaluate("document.querySelector('#similarity-map').layout.shapes.length")
    assert boxes == 30 * 3  # one per layer and key/value head
    assert "heads sharing a key/value head" in page.inner_text("#similarity-metrics")
    page.select_option("#similarity-order", "cluster")
    wait_js(page, "document.querySelector('#similarity-map').layout.shapes.length === 0")
    first = api["order"][0]
    click_cell(page, "#similarity-map", 0, 5)
    wait_js(page, "!document.querySelector('#view-heatmap').hidden")
    assert (url_state(page)["layer"], url_state(page)["head"]) == (str(first // 9), str(first % 9))


@pytest.mark.parametrize(
    ("view", "name", "field", "corner"),
    [
        ("heads", "heads-previous", "previous", "layer \\ head,h0"),
        ("search", "search-role-previous-token", "found", "layer \\ head,h0"),
        ("similarity", "head-similarity-cluster", "similarity", "head \\ head,"),
    ],
)
def test_head_views_export_their_numbers(page, live_server, view, name, field, corner):
    open_view(page, live_server, f"explorer:{view}")
    file_name, body = export(page, "json")
    data = json.loads(body)
    assert name in file_name and len(data[field]) in (6, 72)  # MiniLM: 6 layers, 72 heads
    file_name, body = export(page, "csv")
    assert name in file_name and body.decode().startswith(corner)
    file_name, body = export(page, "png")
    assert body[:8] == b"\x89PNG\r\n\x1a\n"
