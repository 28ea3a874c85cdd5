"""Every page and every explorer tab, opened and drawn, for checks that apply to all of them."""

from app.web.explorer_views import VIEWS as EXPLORER_VIEWS
from app.web.pages import TOPICS_WITH_OWN_ROUTE
from atlas_engine.lab_topics import LAB_TOPICS as ALL_LAB_TOPICS
from tests.e2e.helpers import click_view, wait_js

MINILM = "sentence-transformers/all-MiniLM-L6-v2"
SENTENCE = "The animal didn't cross the street because it was tired."
EXPLORER_TABS = tuple(EXPLORER_VIEWS)  # the registry, in tab order
LAB_TOPICS = tuple(t for t in ALL_LAB_TOPICS if t not in TOPICS_WITH_OWN_ROUTE)  # issue 11's
LAB_PAGES = ("/lab", *(f"/lab/{t}" for t in ALL_LAB_TOPICS))
# Runs, draws, and (stat= in the URL) fills the head finder, so every check sees it too.
ZOOM_PAGE = f"/zoom?model={MINILM}&stat=previous#text=" + SENTENCE.replace(" ", "+")
LEARN_PAGES = ("/learn", "/learn/attention-basics", "/glossary")
IMAGE_PAGE = "/image?sample=chelsea&q=120"  # a patch as the query, drawn on the cat
# every page but the explorer (tabs apart)
PAGES = (*LAB_PAGES, *LEARN_PAGES, ZOOM_PAGE, IMAGE_PAGE, "/docs")
ALL_VIEWS = (*(f"explorer:{tab}" for tab in EXPLORER_TABS), *PAGES)


def settle(page) -> None:
    """Until no request is pending and every chart on the page has drawn."""
    page.wait_for_load_state("networkidle")
    wait_js(
        page,
        "[...document.querySelectorAll('.js-plotly-plot, .plot')].every("
        "p => p.offsetParent === null || (p.data && p.data.length) || !p.classList.contains('plot'))",
    )
    page.wait_for_timeout(150)


def open_view(page, base: str, view: str, model: str = MINILM, text: str = SENTENCE) -> None:
    """Navigate to a page, or run the explorer on a sentence and open one tab."""
    if not view.startswith("explorer:"):
        page.goto(base + view)
        if view == "/docs":
            wait_js(page, "document.querySelectorAll('.opblock').length > 0")
        if view == IMAGE_PAGE:
            drawn = "document.querySelector('#image-status').textContent.includes('pass')"
            wait_js(page, drawn, 60)
        if view == ZOOM_PAGE:
            wait_js(page, "document.querySelector('#zoom-window').textContent.startsWith('Layer')")
            finder = "document.querySelector('#zoom-heads-status').textContent"
            wait_js(page, f"{finder}.startsWith('Every head')", 60)
        settle(page)
        return
    tab = view.split(":", 1)[1]
    from urllib.parse import urlencode

    state = {"model": model, "text": text, "layer": 0, "head": 0, "view": tab}
    page.goto(f"{base}/?{urlencode(state)}")
    page.wait_for_selector("#result:not([hidden])", timeout=90_000)
    _tab_drawn(page, tab)


def open_tab(page, tab: str) -> None:
    """On an explorer that has drawn its answer, switch to one tab (a click, as a user would)."""
    click_view(page, tab)
    _tab_drawn(page, tab)


def _tab_drawn(page, tab: str) -> None:
    page.wait_for_selector(f"#view-{tab}:not([hidden])")
    if tab == "grid":
        wait_js(page, "document.querySelector('#grid-status').textContent.includes('shown')", 60)
    settle(page)


PROSE = "\n\n".join(
    f"The {w} paragraph is here so that the heads of the model have some running English to "
    f"read: every {w} sentence ends, and the next one starts where the last one left off."
    for w in ["first", "second", "third", "fourth", "fifth", "sixth", "seventh", "eighth"]
)
