"""Issue 55: the images page in Chromium. A sample opens from a link, the page shows the API's own
numbers, a click or an arrow key on a patch makes it the query (kept in the URL), every head of
a layer opens from its overlay, and an uploaded image is used (a hostile one refused in words)."""

import io
import json
import urllib.request
from urllib.parse import parse_qs, urlparse

import pytest
from PIL import Image

from tests.e2e.helpers import LONG_TASKS, TASK_GUARD_MS, wait_js

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

DRAWN = "document.querySelector('#image-status').textContent.includes('forward pass')"


def api_rows(base: str, sample: str, query: int) -> dict:
    with urllib.request.urlopen(f"{base}/api/image/samples/{sample}") as response:
        data = response.read()
    request = urllib.request.Request(
        f"{base}/api/image/attention?query={query}", data, {"Content-Type": "image/jpeg"}
    )
    with urllib.request.urlopen(request, timeout=120) as response:
        return json.load(response)


def query_in_url(page) -> int:
    return int(parse_qs(urlparse(page.url).query)["q"][0])


def redrawn(page, query: int) -> None:
    wait_js(page, f"document.querySelector('[data-metric=query] .value').textContent"
                  f".includes('{'class' if query == 0 else 'patch'}')")  # fmt: skip
    page.wait_for_load_state("networkidle")


def test_a_sample_shows_the_apis_rows_and_a_patch_becomes_the_query(page, live_server):
    page.add_init_script(LONG_TASKS)
    page.goto(f"{live_server}/image?sample=chelsea&layer=11&head=2")
    wait_js(page, DRAWN, 90)
    body = api_rows(live_server, "chelsea", 0)
    row = body["weights"][11][2]
    patches = row[1:]
    best = max(range(len(patches)), key=patches.__getitem__)
    r, c = divmod(best, body["cols"])
    assert page.inner_text("#image-readout").startswith(
        f"Most weight: ({r}, {c}) {patches[best]:.3f}"
    )
    share = page.inner_text("[data-metric='prefix-share'] .value")
    assert share == f"{row[0]:.3f}"

    # A click on the patch at row 3, column 5 makes it the query.
    box = page.locator("#image-canvas").bounding_box()
    side = box["width"] / body["cols"]
    page.mouse.click(box["x"] + 5.5 * side, box["y"] + 3.5 * side)
    wait_js(page, "new URLSearchParams(location.search).get('q') === '54'")  # 1 + 3*16 + 5
    redrawn(page, 54)
    assert page.inner_text("[data-metric='query'] .value") == "patch (3, 5)"
    assert query_in_url(page) == 54
    page.focus("#image-canvas")
    page.keyboard.press("ArrowDown")  # row 4, column 5
    wait_js(page, "new URLSearchParams(location.search).get('q') === '70'")
    wait_js(
        page, "document.querySelector('[data-metric=query] .value').textContent === 'patch (4, 5)'"
    )

    # Every head of the layer; a click on one opens it.
    page.select_option("#image-view", "heads")
    assert page.locator("#image-heads .head-thumb").count() == 6
    page.locator("#image-heads .head-thumb").nth(4).click()
    wait_js(page, "new URLSearchParams(location.search).get('head') === '4'")
    assert page.input_value("#image-view") == "head"
    for view in ("rollout", "distance", "artifacts"):
        page.select_option("#image-view", view)
        page.wait_for_timeout(300)
    assert page.locator("#image-distance .js-plotly-plot, #image-distance.js-plotly-plot").count()
    assert page.locator("[role=alert]:not([hidden])").count() == 0
    assert max(page.evaluate("window.__long"), default=0) <= TASK_GUARD_MS
    assert page.errors == []


def test_an_uploaded_image_is_used_and_a_hostile_one_refused(page, live_server, tmp_path):
    page.goto(f"{live_server}/image?sample=rocket")
    wait_js(page, DRAWN, 90)
    picture = tmp_path / "stripes.png"
    image = Image.new("RGB", (300, 200), "white")
    for x in range(0, 300, 20):
        image.paste((200, 30, 30), (x, 0, x + 10, 200))
    out = io.BytesIO()
    image.save(out, "PNG")
    picture.write_bytes(out.getvalue())
    page.set_input_files("#image-file", str(picture))
    wait_js(page, "new URLSearchParams(location.search).get('sample') === ''")  # your own
    wait_js(page, "document.querySelector('#image-sample').value === ''")
    wait_js(page, DRAWN, 60)
    assert page.locator("[role=alert]:not([hidden])").count() == 0

    gif = tmp_path / "moving.png"
    frames = [Image.new("RGB", (16, 16), colour) for colour in ("red", "blue")]
    frames[0].save(gif, "PNG", save_all=True, append_images=frames[1:])  # an animated PNG
    page.set_input_files("#image-file", str(gif))
    wait_js(page, "!document.querySelector('#image-error').hidden")
    assert "animated" in page.inner_text("#image-error").lower()
