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
