"""Issue 54: the induction lab in Chromium. A short run trains live from the page, the page shows
the API's own numbers (the same seed gives the same curve on one machine), the scrubber and Play
move through the kept snapshots, the knobs are in the URL, the trained model opens in the
explorer's trace, and Stop or a closed page ends the run on the server."""

import json
import re
import time
import urllib.error
import urllib.request

import pytest

from tests.e2e.helpers import LONG_TASKS, TASK_GUARD_MS, wait_js

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

SHORT = {"steps": 180, "seed": 3, "heads": 2}  # ~3 s here; the page snapshots every 180 / 60 steps


def train_lines(base: str, body: dict) -> list[dict]:
    request = urllib.request.Request(
        f"{base}/api/lab/train", json.dumps(body).encode(), {"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=120) as response:
        return [json.loads(line) for line in response.read().splitlines() if line.strip()]


def free_to_train(base: str, timeout: float = 20) -> bool:
    """Whether a run is admitted (not 503) within `timeout` s: the previous run has ended."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            train_lines(base, {"steps": 1, "layers": 1, "heads": 1, "every": 1})
            return True
        except urllib.error.HTTPError as err:
            assert err.code == 503, err.read()
            time.sleep(0.5)
    return False


def test_a_run_trains_live_and_shows_the_apis_own_numbers(page, live_server):
    page.add_init_script(LONG_TASKS)
    query = "&".join(f"{k}={v}" for k, v in SHORT.items())
    page.goto(f"{live_server}/lab/induction?{query}")
    assert page.input_value("#train-steps") == "180" and page.input_value("#train-heads") == "2"
    page.evaluate("window.__long = []")
    page.click("#train-start")
    wait_js(page, "!document.querySelector('#train-next').hidden", 120)
    assert page.locator("[role=alert]:not([hidden])").count() == 0
    assert page.inner_text("#train-status").startswith("Done: 180 steps")
    assert max(page.evaluate("window.__long"), default=0) <= TASK_GUARD_MS

    # The same run through the API, on the same server: the same numbers to the last digit.
    lines = train_lines(live_server, {**SHORT, "every": 3})
    snapshots = [line for line in lines if line["event"] == "snapshot"]
    assert page.get_attribute("#train-at", "max") == str(len(snapshots) - 1)
    last = snapshots[-1]
    shown = page.locator("[data-metric='loss-second'] .value").inner_text()
    assert shown == f"{last['loss_second']:.2f} nats"
    drawn = page.evaluate("document.querySelector('#train-loss').data[1].y")
    assert drawn == [s["loss_second"] for s in snapshots]
    heatmap = page.evaluate("document.querySelector('#train-map').data[0].z")
    best = re.match(r"L(\d+) H(\d+)", page.inner_text("[data-metric='task-head'] .value"))
    layer, head = int(best[1]), int(best[2])
    assert heatmap == last["maps"][layer][head]
    probe = page.locator("#train-probe .token").all_inner_texts()
    assert probe == lines[0]["probe"]

    # The scrubber and Play walk the kept snapshots.
    page.fill("#train-at", "10")
    page.dispatch_event("#train-at", "input")
    wait_js(page, "document.querySelector('#train-at-value').textContent.startsWith('step 30 ')")
    assert (
        page.evaluate("document.querySelector('#train-map').data[0].z")
        == (snapshots[10]["maps"][layer][head])
    )
    page.click("#train-play")
    wait_js(page, "document.querySelector('#train-at').value > 12")
    page.click("#train-play")  # Pause
    wait_js(page, "document.querySelector('#train-play').textContent === 'Play'")

    # The trained model opens in the explorer's trace, on the probe.
    href = page.get_attribute("#train-links a", "href")
    assert "view=trace" in href and "model=trained%2F" in href
    page.goto(live_server + href)
    page.wait_for_selector("#view-trace:not([hidden])", timeout=90_000)
    wait_js(page, "document.querySelectorAll('#view-trace .js-plotly-plot').length >= 2", 60)
    assert page.locator("[role=alert]:not([hidden])").count() == 0
    assert page.errors == []


def test_stop_and_a_closed_page_end_the_run_on_the_server(page, browser, live_server):
    page.goto(f"{live_server}/lab/induction?steps=5000&heads=1")
    page.click("#train-start")
    wait_js(page, "Number(document.querySelector('#train-at').max) >= 2", 60)
    page.click("#train-stop")
    wait_js(page, "document.querySelector('#train-status').textContent.startsWith('Stopped')")
    assert page.is_enabled("#train-start") and not page.is_enabled("#train-stop")
    assert free_to_train(live_server)  # the server ended it at its next snapshot

    other = browser.new_page()
    other.goto(f"{live_server}/lab/induction?steps=5000&heads=1")
    other.click("#train-start")
    wait_js(other, "Number(document.querySelector('#train-at').max) >= 2", 60)
    other.close()
    assert free_to_train(live_server)
