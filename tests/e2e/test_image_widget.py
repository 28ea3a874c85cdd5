"""Issue 55, point 4: the notebook's image widget. Built from a bundled photo, its traits carry
exactly run_image's maps and the image as the model saw it, its module is self-contained, and
in Chromium it draws the overlay, says where the head looks, and moves the query on a click."""

import base64
import io

import numpy as np
import pytest
from PIL import Image

from atlas_engine.vision.samples import sample_bytes
from attention_atlas import run_image, show_image
from tests.conftest import CACHE_DIR
from tests.e2e.helpers import wait_js

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

# A stand-in for anywidget's model in the page: get, set, save_changes and on, over plain traits.
HARNESS = """async ({ esm, traits, maps, png }) => {
  const bytes = (b64) => { const s = atob(b64); const a = new Uint8Array(s.length);
    for (let i = 0; i < s.length; i++) a[i] = s.charCodeAt(i); return new DataView(a.buffer); };
  const values = { ...traits, maps: bytes(maps), png: bytes(png) };
  const handlers = {};
  window.model = {
    get: (k) => values[k],
    set: (k, v) => { values[k] = v; },
    save_changes: () => {},
    on: (event, fn) => { (handlers[event] ||= []).push(fn); },
    values,
  };
  const url = URL.createObjectURL(new Blob([esm], { type: "text/javascript" }));
  const module = await import(url);
  const el = document.createElement("div");
  document.body.append(el);
  await module.default.render({ model: window.model, el });
}"""


@pytest.fixture(scope="module")
def cat():
    """run_image on the cat, reading the suite's converted copy (not the user's cache folder)."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("ATLAS_CACHE_DIR", str(CACHE_DIR))
        return run_image(sample_bytes("chelsea"))


def test_the_widget_carries_the_runs_maps_and_image(cat):
    widget = show_image(cat, head=5)
    maps = np.frombuffer(widget.maps, dtype="<f4").reshape(cat.attentions.shape)
    assert np.array_equal(maps, cat.attentions.numpy())
    seen = Image.open(io.BytesIO(widget.png))
    assert seen.size == (224, 224) and np.array_equal(np.asarray(seen), cat.seen)
    assert (widget.layer, widget.head, widget.query) == (11, 5, 0)
    assert widget.meta["rows"] == widget.meta["cols"] == 16 and widget.meta["prefix"] == 1
    assert 'from "./' not in widget._esm and "from './" not in widget._esm  # all inlined
    with pytest.raises(ValueError, match="below 12, 6 and 257"):
        show_image(cat, layer=12)


def test_the_widget_draws_and_a_click_moves_the_query(browser, cat):
    widget = show_image(cat, head=5)
    page = browser.new_page(viewport={"width": 1000, "height": 800})
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    traits = {k: getattr(widget, k) for k in ("meta", "layer", "head", "query")}
    page.evaluate(
        HARNESS,
        {
            "esm": widget._esm,
            "traits": traits,
            "maps": base64.b64encode(widget.maps).decode(),
            "png": base64.b64encode(widget.png).decode(),
        },
    )
    wait_js(page, "document.querySelector('.readout')?.textContent.startsWith('Layer 11 head 5')")
    row = cat.attentions[11, 5, 0, 1:]
    best = int(row.argmax())
    assert f"patch ({best // 16}, {best % 16}) ({float(row[best]):.3f})" in page.inner_text(
        ".readout"
    )
    assert page.evaluate("document.querySelector('canvas').width") == 448
    assert page.locator(".head-thumb").count() == 6
    box = page.locator("canvas").first.bounding_box()
    side = box["width"] / 16
    page.mouse.click(box["x"] + 5.5 * side, box["y"] + 6.5 * side)  # patch (6, 5)
    assert page.evaluate("window.model.values.query") == 1 + 6 * 16 + 5
    wait_js(page, "document.querySelector('.readout').textContent.includes('from patch (6, 5)')")
    page.locator(".head-thumb").nth(2).click()
    assert page.evaluate("window.model.values.head") == 2
    assert errors == []
    page.close()
