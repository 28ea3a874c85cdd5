"""Helpers for the browser tests."""

import math
import time


def log_colours(weights) -> list[float]:
    """What the log colour scale draws for each weight (rows of them), flat: its log10,
    clipped at 10^-6 (zero, a masked key, there too)."""
    return [max(-6.0, math.log10(w)) if w > 0 else -6.0 for row in weights for w in row]


def export(page, fmt: str) -> tuple[str, bytes]:
    """(file name, bytes) of what the page's export button for `fmt` saves."""
    with page.expect_download() as info:
        page.click(f"[data-export='{fmt}']")
    download = info.value
    with open(download.path(), "rb") as f:
        return download.suggested_filename, f.read()


def wait_js(page, expression: str, timeout: float = 30.0):
    """Poll a JavaScript expression until it is truthy.

    Playwright's wait_for_function compiles its argument with eval, which the app's
    Content-Security-Policy forbids; page.evaluate does not, so the tests keep the CSP on.
    """
    deadline = time.monotonic() + timeout
    while True:
        value = page.evaluate(
            f"() => {{ try {{ return {expression}; }} catch (e) {{ return null; }} }}"
        )
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for: {expression}")
        time.sleep(0.1)


def answer_late(seconds: float):
    """A page.route handler that passes each request on after `seconds`: a slow server, made
    so on any machine (a fast one answers before a page's timers would show anything)."""

    def handler(route) -> None:
        time.sleep(seconds)
        route.continue_()

    return handler


# Each shown chart's axis titles that cover one of its tick labels or stick out of the chart,
# as lines of text (Plotly's SVG: a title is text.xtitle, .ytitle, .x2title...; tick labels
# are the text of the axis layers).
AXIS_TITLE_PROBLEMS = """() => {
  const out = [];
  const apart = (a, b) => a.right <= b.left + 1 || b.right <= a.left + 1
    || a.bottom <= b.top + 1 || b.bottom <= a.top + 1;
  const inside = (a, b) => a.left >= b.left - 1 && a.right <= b.right + 1
    && a.top >= b.top - 1 && a.bottom <= b.bottom + 1;
  for (const plot of document.querySelectorAll('.js-plotly-plot')) {
    if (!plot.offsetParent) continue;
    const name = plot.id || plot.dataset.stage || plot.closest('[id]')?.id;
    const box = plot.getBoundingClientRect();
    const ticks = [...plot.querySelectorAll('.xaxislayer-above text, .yaxislayer-above text')]
      .filter(t => t.textContent.trim()).map(t => [t.textContent, t.getBoundingClientRect()]);
    const titles = [...plot.querySelectorAll('.infolayer text')]
      .filter(t => /^[xy]\\d*title$/.test(t.getAttribute('class')) && t.textContent.trim());
    for (const title of titles) {
      const t = title.getBoundingClientRect();
      const what = `${name}: axis title “${title.textContent}”`;
      if (!inside(t, box)) out.push(`${what} sticks out of the chart`);
      const covered = ticks.filter(([, b]) => !apart(t, b)).map(([text]) => text);
      if (covered.length) out.push(`${what} covers ${covered.slice(0, 3).join(', ')}`);
    }
  }
  return out;
}"""


def click_view(page, view: str) -> None:
    """Opens an explorer view as a user does: its question's tab first (the views of the other
    questions are hidden), then the view's own tab."""
    group = page.get_attribute(f"#tab-{view}", "data-group")
    if page.get_attribute(f"#group-{group}", "aria-selected") != "true":
        page.click(f"#group-{group}")
    page.click(f"#tab-{view}")


# A main-thread task may take TASK_BUDGET_MS at most: bench/browser.py measures it with nothing
# else running. Tests guard it only at TASK_GUARD_MS, a margin a busy shared machine cannot
# break (a 309 ms task once came from other work on the machine, not from the page); a task
# past the guard is a regression on any machine.
LONG_TASKS = """window.__long = [];
new PerformanceObserver((list) => {
  for (const entry of list.getEntries()) window.__long.push(Math.round(entry.duration));
}).observe({ type: "longtask", buffered: true });"""
"""An init script: every main-thread task over 50 ms the page runs, its duration in
window.__long (page.add_init_script(LONG_TASKS); read with page.evaluate("window.__long"))."""
TASK_BUDGET_MS = 200
TASK_GUARD_MS = 5 * TASK_BUDGET_MS
