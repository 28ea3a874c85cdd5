"""Checks every page and explorer tab must pass (issue 9): nothing points off-origin, axe-core
finds no violation of any impact, nothing is wider than a 390 px phone, and no chart's axis
title covers its tick labels or leaves the chart, at 1280 px or 390 px. The explorer is opened
once a width and its tabs visited in turn, as a user does (a page load a tab cost the suite
~100 s)."""

import pytest
from axe_playwright_python.sync_playwright import Axe

from tests.e2e.helpers import AXIS_TITLE_PROBLEMS
from tests.e2e.pages import EXPLORER_TABS, PAGES, open_tab, open_view

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

AXE = Axe()


@pytest.mark.parametrize("view", PAGES)
def test_nothing_points_off_origin_and_axe_finds_nothing_serious(page, live_server, view):
    """One page load per page for the desktop checks, and the link it writes: a page that runs
    a model names it in its URL, its default included (issue 37), so the link restores it."""
    open_view(page, live_server, view)
    assert desktop_problems(page) == []
    if page.locator("main select[id$='-model']").count():
        assert "model=" in page.url.split("#")[0], page.url


def test_no_explorer_tab_points_off_origin_or_has_serious_axe_findings(page, live_server):
    open_view(page, live_server, f"explorer:{EXPLORER_TABS[0]}")
    problems = {}
    for tab in EXPLORER_TABS:
        open_tab(page, tab)
        problems[tab] = desktop_problems(page)
    assert not any(problems.values()), {tab: found for tab, found in problems.items() if found}


def desktop_problems(page) -> list[str]:
    """Links or forms off the origin, a tool bar button that would send a chart away, axis
    titles over tick labels, and axe-core's violations, as lines of text."""
    links = page.evaluate(
        "[...document.querySelectorAll('a[href], form[action]')]"
        ".map(a => a.href || a.action).filter(h => !h.startsWith(location.origin))"
    )
    titles = page.evaluate(
        "[...document.querySelectorAll('.modebar-btn')].map(b => b.getAttribute('data-title'))"
    )
    sharing = [t for t in titles if any(w in t for w in ("Share", "Cloud", "Studio"))]
    results = AXE.run(page)
    bad = [
        f"{v['id']} ({v['impact']}): {v['help']} — "
        + "; ".join(n["target"][0] for n in v["nodes"][:4])
        for v in results.response["violations"]
    ]
    found = [f"off-origin: {link}" for link in links] + [f"tool bar: {t}" for t in sharing]
    return found + page.evaluate(AXIS_TITLE_PROBLEMS) + bad


LAYOUT_PROBLEMS = """() => {
  const out = [];
  const width = document.documentElement.clientWidth;
  if (document.documentElement.scrollWidth > width) {
    const wide = [...document.querySelectorAll('body *')]
      .filter(e => e.getBoundingClientRect().right > width + 1 && e.offsetParent);
    const names = wide.slice(0, 3).map(e => e.tagName + '#' + e.id + '.' + e.className);
    out.push(`page is ${document.documentElement.scrollWidth} px wide: ` + names.join(', '));
  }
  for (const plot of document.querySelectorAll('.js-plotly-plot')) {
    if (!plot.offsetParent) continue;
    const box = plot.getBoundingClientRect();
    const title = plot.querySelector('.gtitle');
    if (!title) continue;
    const t = title.getBoundingClientRect();
    if (t.left < box.left - 1 || t.right > box.right + 1) out.push(`${plot.id}: title clipped`);
    const bar = plot.querySelector('.modebar');
    if (bar) {
      const m = bar.getBoundingClientRect();
      const apart = m.bottom <= t.top || m.top >= t.bottom || m.right <= t.left || m.left >= t.right;
      if (!apart && m.width > 0) out.push(`${plot.id}: tool bar over the title`);
    }
  }
  return out;
}"""


def phone_problems(page) -> list[str]:
    return page.evaluate(LAYOUT_PROBLEMS) + page.evaluate(AXIS_TITLE_PROBLEMS)


def phone(browser):
    return browser.new_context(viewport={"width": 390, "height": 844}, is_mobile=True)


@pytest.mark.parametrize("view", PAGES)
def test_a_390_px_phone_sees_everything(browser, live_server, view):
    context = phone(browser)
    try:
        page = context.new_page()
        open_view(page, live_server, view)
        assert phone_problems(page) == []
    finally:
        context.close()


def test_a_390_px_phone_sees_every_explorer_tab(browser, live_server):
    context = phone(browser)
    try:
        page = context.new_page()
        open_view(page, live_server, f"explorer:{EXPLORER_TABS[0]}")
        problems = {}
        for tab in EXPLORER_TABS:
            open_tab(page, tab)
            problems[tab] = phone_problems(page)
        assert not any(problems.values()), {tab: found for tab, found in problems.items() if found}
    finally:
        context.close()
