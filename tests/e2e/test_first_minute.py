"""The first minute (issue 37): links that restore every state, a first picture on screen at
once on a head worth looking at, two rows of choices, glossed terms, and the defects a new
user met, each in Chromium at 1280 × 800 and 390 × 844."""

from urllib.parse import parse_qs, urlencode, urlparse

import pytest

from atlas_engine.schemas.attention import EXAMPLE_TEXT, MAX_TEXT_CHARS
from tests.e2e.helpers import click_view, wait_js
from tests.e2e.pages import EXPLORER_TABS, MINILM, settle

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

SIZES = {"desktop": (1280, 800), "phone": (390, 844)}
SMOLLM2 = "HuggingFaceTB/SmolLM2-135M-Instruct"


@pytest.fixture(params=list(SIZES))
def sized(request, browser):
    width, height = SIZES[request.param]
    context = browser.new_context(viewport={"width": width, "height": height})
    page = context.new_page()
    errors = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.errors = errors
    yield page
    context.close()


def fresh(browser, url):
    """A link opened in a new browser context: nothing carried over but the link."""
    context = browser.new_context(viewport={"width": 1280, "height": 800})
    page = context.new_page()
    page.goto(url)
    return context, page


def drawn(page):
    page.wait_for_selector("#result:not([hidden])", timeout=90_000)
    settle(page)


def test_a_bare_page_runs_the_example_opens_at_its_top_with_the_first_picture(sized, live_server):
    page = sized
    page.goto(live_server + "/")
    drawn(page)
    params = parse_qs(urlparse(page.url).query)
    # The link names everything, defaults included.
    assert params["model"] == [MINILM] and params["text"] == [EXAMPLE_TEXT]
    assert params["layer"] == ["0"] and params["head"] == ["2"] and params["view"] == ["heatmap"]
    why = page.inner_text("#head-why")
    assert why.startswith(
        "Opened on layer 0 head 2, the clearest role on this text: previous-token"
    )
    assert "(previous ≥ 0.5)" in why
    # The page opens at its top, the title and the sentence box in view (issue 49.6) ...
    box = lambda selector: page.evaluate(  # noqa: E731
        f"document.querySelector('{selector}').getBoundingClientRect().toJSON()"
    )
    height = page.evaluate("innerHeight")
    assert page.evaluate("scrollY") == 0
    assert box("h1")["top"] >= 0 and box("#text")["bottom"] <= height
    # ... and on a desktop the first picture starts on that first screen: its title and the
    # map's first rows, without scrolling by hand.
    # No blank band under the map: its box is the chart's own height (issue 49.9).
    assert box("#heatmap")["height"] <= box("#heatmap .main-svg")["height"] + 2
    if page.viewport_size["width"] >= 1280:
        chart, cells = box("#heatmap .main-svg"), box("#heatmap .nsewdrag")
        assert chart["top"] >= 0 and cells["top"] <= height - 120, (chart, cells, height)
    assert page.errors == []


def test_a_link_without_text_runs_the_example_and_its_head_wins(page, live_server):
    page.goto(f"{live_server}/?layer=3&head=1&view=lines")
    drawn(page)
    assert page.input_value("#text") == EXAMPLE_TEXT
    assert page.locator("#view-lines").is_visible()
    assert page.input_value("#layer") == "3" and page.input_value("#head") == "1"
    assert page.inner_text("#head-why").startswith("Layer 3 head 1:")
    params = parse_qs(urlparse(page.url).query)
    assert params["text"] == [EXAMPLE_TEXT] and params["model"] == [MINILM]


def open_all(browser, urls):
    """Each link in a fresh browser context of its own, all loading at once (the server's
    cached pass and the machine's two cores are shared between them)."""
    contexts = [browser.new_context(viewport={"width": 1280, "height": 800}) for _ in urls]
    pages = [context.new_page() for context in contexts]
    for page, url in zip(pages, urls, strict=True):
        page.goto(url, wait_until="commit")
    return contexts, pages


def test_every_views_link_with_the_example_opens_it_in_a_fresh_browser(browser, live_server):
    state = {"model": MINILM, "text": EXAMPLE_TEXT, "layer": 1, "head": 3}
    urls = [f"{live_server}/?{urlencode({**state, 'view': view})}" for view in EXPLORER_TABS]
    contexts, pages = open_all(browser, urls)
    try:
        for view, page in zip(EXPLORER_TABS, pages, strict=True):
            drawn(page)
            assert page.locator(f"#view-{view}").is_visible(), view
            assert page.get_attribute(f"#tab-{view}", "aria-selected") == "true"
            group = page.get_attribute(f"#tab-{view}", "data-group")
            assert page.get_attribute(f"#group-{group}", "aria-selected") == "true"
            assert page.input_value("#layer") == "1" and page.input_value("#head") == "3"
            assert parse_qs(urlparse(page.url).query)["view"] == [view]
    finally:
        for context in contexts:
            context.close()


def test_lab_pages_reopen_from_the_links_they_write(browser, live_server):
    """Every lab page names its model in its link (test_every_page); here the link a page with
    two forms and a model writes, and one with typed matrices, each opened in a fresh browser,
    show the same state."""
    for path in ("/lab/positions", "/lab/heads", "/lab/step-by-step"):
        first_context, first = fresh(browser, live_server + path)
        settle(first)
        link = first.url
        first_context.close()
        context, page = fresh(browser, link)
        try:
            settle(page)
            assert page.url == link, path
            assert "model=" in link or path == "/lab/step-by-step", link
        finally:
            context.close()


def test_a_deep_zoom_state_opens_from_its_link(browser, live_server):
    query, fragment = (
        urlencode({"model": MINILM, "layer": 2, "head": 5}),
        urlencode({"text": EXAMPLE_TEXT}),
    )
    url = f"{live_server}/zoom?{query}#{fragment}"
    context, page = fresh(browser, url)
    try:
        wait_js(
            page, "document.querySelector('#zoom-window').textContent.startsWith('Layer 2')", 90
        )
        assert page.input_value("#zoom-head") == "5"
        assert "text=" in urlparse(page.url).fragment
    finally:
        context.close()


def test_a_long_text_travels_in_the_fragment(page, live_server):
    text = " ".join(["international organizations"] * 80)  # 2,239 characters, 162 tokens
    page.goto(f"{live_server}/?{urlencode({'model': MINILM})}#{urlencode({'text': text})}")
    drawn(page)
    link = urlparse(page.url)
    assert "text" not in parse_qs(link.query) and parse_qs(link.fragment)["text"] == [text]
    assert page.input_value("#text") == text


def test_at_390_px_the_choices_are_two_rows(sized, live_server):
    page = sized
    page.goto(f"{live_server}/?view=mask")
    drawn(page)
    for row in ("#result .tabs.groups", "#view-tabs"):
        tops = page.eval_on_selector_all(
            f"{row} button:not([hidden])", "els => els.map(e => e.getBoundingClientRect().top)"
        )
        assert len(set(round(t) for t in tops)) == 1, (row, tops)
    assert page.locator("#view-tabs button:not([hidden])").count() == 5  # Explain the numbers
    assert page.get_attribute("#view-guide a", "href") == "/lab/masks"
    page.goto(f"{live_server}/?view=value")  # the last view of a later group
    drawn(page)
    for selected in ("#group-explain", "#tab-value"):  # scrolled into its row's view
        inside = page.evaluate(
            f"""(() => {{ const t = document.querySelector('{selected}').getBoundingClientRect();
            const r = document.querySelector('{selected}').parentElement.getBoundingClientRect();
            return t.left >= r.left - 1 && t.right <= r.right + 1; }})()"""
        )
        assert inside, selected


def test_terms_have_a_gloss_on_hover_and_focus_and_a_glossary_entry(page, live_server):
    page.goto(f"{live_server}/?view=ablation")
    drawn(page)
    term = page.locator("#view-ablation a.term").first
    term.hover()
    tip = page.locator("#gloss-tip")
    assert tip.is_visible() and tip.inner_text() == term.get_attribute("data-gloss")
    page.mouse.move(0, 0)
    term.focus()
    assert tip.is_visible()
    href = term.get_attribute("href")
    page.goto(live_server + href)
    assert page.locator(f"#{href.split('#')[1]} dt").is_visible()
    assert page.locator(".glossary .entry").count() >= 25
    assert page.locator(".glossary .formula").count() >= 15
    assert (
        page.locator(".glossary [data-picture] svg, .glossary [data-picture] .tokens").count() >= 5
    )


def test_over_long_text_is_refused_with_the_limit_never_cut(page, live_server):
    page.goto(live_server + "/")
    drawn(page)
    text = "a" * (MAX_TEXT_CHARS + 10)
    page.fill("#text", text)
    assert len(page.input_value("#text")) == MAX_TEXT_CHARS + 10  # nothing cut
    page.click("#run")
    error = page.inner_text("#run-error")
    assert f"{MAX_TEXT_CHARS:,}" in error and "nothing was cut" in error


def test_the_induction_test_keeps_the_users_text_one_click_away(page, live_server):
    text = "Birds sing in the morning."
    page.goto(f"{live_server}/?{urlencode({'model': MINILM, 'text': text, 'view': 'heads'})}")
    drawn(page)
    page.click("#heads-induction")
    wait_js(page, f"document.querySelector('#text').value !== {text!r}", 60)
    page.get_by_role("button", name="Back to your text").click()
    wait_js(page, f"document.querySelector('#text').value === {text!r}", 60)
    assert parse_qs(urlparse(page.url).query)["view"] == ["heads"]


def test_arrow_keys_work_after_a_click_on_the_map(page, live_server):
    page.goto(f"{live_server}/?{urlencode({'layer': 1, 'head': 3})}")
    drawn(page)
    page.click("#heatmap .nsewdrag", position={"x": 20, "y": 20})
    page.keyboard.press("ArrowRight")
    wait_js(page, "document.querySelector('#head').value === '4'")
    page.keyboard.press("ArrowDown")
    wait_js(page, "document.querySelector('#layer').value === '2'")


def test_compare_starts_b_on_as_head(page, live_server):
    page.goto(f"{live_server}/?{urlencode({'layer': 2, 'head': 5})}")
    drawn(page)
    click_view(page, "compare")
    wait_js(page, "document.querySelector('#compare-b').data?.length > 0", 60)
    assert page.input_value("#compare-layer") == "2" and page.input_value("#compare-head") == "5"
    assert "B is the open head" in page.inner_text("#compare-alignment")


def test_a_lesson_asks_a_question_answered_by_a_click_in_the_view(page, live_server):
    page.goto(f"{live_server}/learn/attention-basics?step=2")
    drawn(page)
    wait_js(page, "document.querySelector('#heatmap').dataset.lessonBound === '1'")
    box = page.evaluate(
        "(() => { const p = document.querySelector('#heatmap'); const r = p.querySelector('.nsewdrag')"
        ".getBoundingClientRect(); return [r.left, r.top, r.width, r.height, p.data[0].z.length]; })()"
    )
    left, top, width, height, n = box

    def click(row, col):
        page.mouse.click(left + (col + 0.5) * width / n, top + (row + 0.5) * height / n)

    click(8, 3)
    wait_js(page, "document.querySelector('.lesson-feedback').dataset.kind === 'wrong'")
    assert page.inner_text(".lesson-feedback").startswith("Not this one: ‘didn’")
    page.wait_for_timeout(600)  # two clicks closer together are Plotly's double click
    click(8, 7)
    wait_js(page, "document.querySelector('.lesson-feedback').dataset.kind === 'right'")
    assert page.inner_text(".lesson-feedback").startswith("Right: ‘the’")
    page.get_by_role("button", name="Next →").click()
    page.wait_for_url("**layer=2**")
    assert page.locator(".lesson-bar").inner_text().find("step 3 of 6") >= 0


def test_a_pasted_lesson_plays_from_a_link_that_carries_it(page, live_server, browser):
    page.goto(live_server + "/learn")
    page.click("#paste-example")
    wait_js(page, "document.querySelector('#paste-text').value.includes('my-lesson')")
    page.click("#paste-form button[type=submit]")
    page.wait_for_url("**/learn/pasted#lesson=**")
    page.wait_for_selector("#lesson-steps li")
    assert page.inner_text("#lesson-title").startswith("My copy of")
    context, other = fresh(browser, page.url)  # the link alone, in another browser
    try:
        other.wait_for_selector("#lesson-steps li")
        assert other.inner_text("#lesson-title") == page.inner_text("#lesson-title")
    finally:
        context.close()


def panel_top(page) -> float:
    return page.evaluate("document.querySelector('.lesson-bar').getBoundingClientRect().top")


def test_the_lesson_panel_never_covers_the_map_its_question_is_about(sized, live_server):
    """Issue 49.3: a key question's map, whole, above the panel at 1280 and 390 px."""
    page = sized
    page.goto(f"{live_server}/learn/attention-basics?step=2")
    drawn(page)
    wait_js(page, "document.querySelector('#heatmap').dataset.lessonBound === '1'")
    # The player brings the map into view as the page settles (under load, in its own time).
    in_sight = """(() => {
      const cells = document.querySelector('#heatmap .nsewdrag').getBoundingClientRect();
      const panel = document.querySelector('.lesson-bar').getBoundingClientRect();
      return cells.top >= 0 && cells.bottom <= panel.top + 1;
    })()"""
    wait_js(page, in_sight, 30)


def test_a_head_question_takes_a_row_of_the_table_and_shows_what_it_ranks_by(sized, live_server):
    """Issue 49.3: "click its cell in the map (or its row in the table)": a click anywhere on
    the row answers; the column the rows are ranked by comes next to the head, labelled, on a
    phone too; the map the question is about is in view above the panel."""
    page = sized
    page.goto(f"{live_server}/learn/find-the-induction-head?step=2")
    drawn(page)
    wait_js(page, "document.querySelectorAll('#view-heads table tbody tr').length > 0", 120)
    # The map the question is about: its top rows in sight above the panel.
    in_sight = """(() => {
      const grid = document.querySelector('#view-heads .js-plotly-plot');
      if (!grid?.data?.length) return false;
      const top = grid.getBoundingClientRect().top;
      return top >= -1 && top < document.querySelector('.lesson-bar').getBoundingClientRect().top - 200;
    })()"""
    wait_js(page, in_sight, 60)
    header = page.locator("#view-heads table thead th").nth(2)
    assert header.inner_text().startswith("induction")
    row = page.locator("#view-heads table tbody tr").first
    row.scroll_into_view_if_needed()
    value = row.locator("td").nth(1)  # the induction column, beside the head
    assert value.bounding_box()["x"] + value.bounding_box()["width"] <= page.viewport_size["width"]
    value.click()
    wait_js(page, "document.querySelector('.lesson-feedback').dataset.kind === 'right'", 60)
    assert page.inner_text(".lesson-feedback").startswith("Right. Layer 18 head 6: induction")
