"""Checks every page and explorer tab must pass (issue 9): nothing points off-origin, axe-core
finds no critical or serious violation, and nothing is wider than a 390 px phone."""

import pytest
from axe_playwright_python.sync_playwright import Axe

from tests.e2e.pages import ALL_VIEWS, open_view

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

AXE = Axe()


@pytest.mark.parametrize("view", ALL_VIEWS)
def test_nothing_points_off_origin_and_axe_finds_nothing_serious(page, live_server, view):
    """One page load per view for both desktop checks (the suite opens ~45 views)."""
    open_view(page, live_server, view)
    links = page.evaluate(
        "[...document.querySelectorAll('a[href], form[action]')]"
        ".map(a => a.href || a.action).filter(h => !h.startsWith(location.origin))"
    )
    assert links == []
    titles = page.evaluate(
        "[...document.querySelectorAll('.modebar-btn')].map(b => b.getAttribute('data-title'))"
    )
    assert not [t for t in titles if any(w in t for w in ("Share", "Cloud", "Studio"))], titles
    results = AXE.run(page)
    bad = [
        f"{v['id']} ({v['impact']}): {v['help']} — "
        + "; ".join(n["target"][0] for n in v["nodes"][:4])
        for v in results.response["violations"]
        if v["impact"] in ("critical", "serious")
    ]
    assert bad == [], "\n".join(bad)


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


@pytest.mark.parametrize("view", ALL_VIEWS)
def test_a_390_px_phone_sees_everything(browser, live_server, view):
    context = browser.new_context(viewport={"width": 390, "height": 844}, is_mobile=True)
    phone = context.new_page()
    try:
        open_view(phone, live_server, view)
        problems = phone.evaluate(LAYOUT_PROBLEMS)
        assert problems == [], problems
    finally:
        context.close()
