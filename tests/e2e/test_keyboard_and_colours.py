"""Issue 9.5-6: the all-heads grid is one tab stop with arrow keys inside, Enter opens a head
with focus in its view, Ctrl+Enter submits, and every head of a layer has its own colour."""

import pytest

from tests.e2e.helpers import wait_js
from tests.e2e.pages import open_view

pytestmark = [pytest.mark.e2e, pytest.mark.slow]


def test_the_grid_is_one_tab_stop_and_enter_opens_the_head_in_focus(page, live_server):
    open_view(page, live_server, "explorer:grid")
    assert page.locator("#grid canvas[tabindex='0']").count() == 1
    assert page.locator("#grid canvas[tabindex='-1']").count() == 71
    page.focus("#grid canvas[tabindex='0']")
    for key in ("ArrowRight", "ArrowRight", "ArrowDown", "ArrowDown", "ArrowDown"):
        page.keyboard.press(key)
    focused = page.evaluate(
        "[document.activeElement.dataset.layer, document.activeElement.dataset.head]"
    )
    assert focused == ["3", "2"]
    page.keyboard.press("Tab")  # one tab leaves the grid entirely
    assert page.evaluate("!document.querySelector('#grid').contains(document.activeElement)")
    page.keyboard.press("Shift+Tab")
    page.keyboard.press("Enter")
    page.wait_for_selector("#view-heatmap:not([hidden])")
    assert (page.input_value("#layer"), page.input_value("#head")) == ("3", "2")
    assert page.evaluate("document.activeElement.id") == "views"
    assert not page.errors


def test_ctrl_enter_in_the_sentence_box_submits(page, live_server):
    page.goto(f"{live_server}/")
    wait_js(page, "document.querySelectorAll('#model option').length > 1")
    page.fill("#text", "Keyboard users press Control and Enter.")
    page.focus("#text")
    page.keyboard.press("Control+Enter")
    wait_js(page, "/keyboard/i.test(document.querySelector('#tokens').textContent)", 60)


def test_every_head_of_a_layer_has_its_own_readable_colour(page, live_server):
    open_view(page, live_server, "explorer:lines")
    for box in page.locator("#lines-heads input").all():
        if not box.is_checked():
            box.check()
    wait_js(
        page,
        "new Set([...document.querySelectorAll('#lines line')]"
        ".map(l => l.getAttribute('stroke'))).size === 12",
    )
    colours = page.evaluate(
        "[...document.querySelectorAll('#lines-heads label')].map(l => getComputedStyle(l).color)"
    )
    assert len(set(colours)) == 12

    def contrast(css: str) -> float:
        r, g, b = (int(x) / 255 for x in css[css.index("(") + 1 : -1].split(",")[:3])
        lin = [c / 12.92 if c <= 0.03928 else ((c + 0.055) / 1.055) ** 2.4 for c in (r, g, b)]
        return 1.05 / (0.2126 * lin[0] + 0.7152 * lin[1] + 0.0722 * lin[2] + 0.05)

    assert min(contrast(c) for c in colours) >= 4.5


SHOWN_LINES = """side => [...document.querySelectorAll('#lines line')]
  .filter(l => l.style.display !== 'none').map(l => +l.dataset[side])"""


def test_hovering_or_focusing_a_token_of_the_lines_view_shows_only_its_lines(page, live_server):
    open_view(page, live_server, "explorer:lines")
    every = page.evaluate(SHOWN_LINES, "q")
    assert len(set(every)) > 3  # lines from many queries
    query = page.locator("#lines text[data-side='q'][data-index='3']")
    query.hover()
    assert set(page.evaluate(SHOWN_LINES, "q")) == {3}
    dimmed = page.locator("#lines text.dim").count()
    assert dimmed == page.locator("#lines text[data-side]").count() - 1
    page.mouse.move(1, 1)  # leaving the label shows every line again
    assert page.evaluate(SHOWN_LINES, "q") == every
    assert page.locator("#lines text.dim").count() == 0
    page.focus("#lines text[data-side='k'][data-index='0']")  # the keyboard does the same
    assert set(page.evaluate(SHOWN_LINES, "k")) == {0}
    page.keyboard.press("Tab")  # the next label (row by row): query 1
    active = page.evaluate(
        "[document.activeElement.dataset.side, document.activeElement.dataset.index]"
    )
    assert active == ["q", "1"]
    assert set(page.evaluate(SHOWN_LINES, "q")) == {1}
    assert not page.errors
