"""Issue 9.4: every view exports what it shows, named for what it is."""

import json
import re

import pytest
import requests

from tests.e2e.helpers import export, wait_js
from tests.e2e.pages import MINILM, open_view

pytestmark = [pytest.mark.e2e, pytest.mark.slow]


def test_what_if_exports_say_they_are_counterfactual(page, live_server):
    open_view(page, live_server, "explorer:whatif")
    name, body = export(page, "json")
    data = json.loads(body)
    assert "what-if-unscaled" in name and "counterfactual" in data["what"]
    assert data["counterfactual"]["temperature"] == 1 and data["counterfactual"]["unscaled"]
    assert "weights" not in data and len(data["counterfactual_weights"]) == len(data["tokens"])
    assert data["model_weights"] != data["counterfactual_weights"]
    name, _ = export(page, "csv")
    assert "what-if" in name


def test_token_to_token_exports_png_json_and_csv(page, live_server):
    open_view(page, live_server, "explorer:lines")
    name, body = export(page, "png")
    assert name.endswith(".png") and body[:8] == b"\x89PNG\r\n\x1a\n"
    name, body = export(page, "json")
    data = json.loads(body)
    assert data["overlaid_heads"] == [0] and len(data["weights_by_head"]["0"]) == len(
        data["tokens"]
    )
    assert data["weights"] == data["weights_by_head"]["0"]  # the open head's rows, built on export
    assert all(sum(row) == pytest.approx(1, abs=1e-5) for row in data["weights"])
    name, body = export(page, "csv")
    assert body.decode().startswith("query \\ key,[CLS]")
    name, body = export(page, "svg")
    assert name.endswith(".svg") and b"<svg" in body and b"<line" in body


def test_query_key_exports_its_numbers(page, live_server):
    open_view(page, live_server, "explorer:qk")
    wait_js(page, "document.querySelector('#qk-products').data.length > 0")
    _, body = export(page, "json")
    data = json.loads(body)
    assert len(data["products"]) == len(data["row_tokens"]) and len(data["q"]) == data["head_dim"]
    _, body = export(page, "csv")
    assert body.decode().splitlines()[1].split(",")[0] == "[CLS]"


def test_the_grid_exports_a_png_and_the_values_it_shows(page, live_server):
    open_view(page, live_server, "explorer:grid")
    name, body = export(page, "png")
    assert name.endswith(".png") and body[:8] == b"\x89PNG\r\n\x1a\n"
    _, body = export(page, "json")
    data = json.loads(body)
    assert len(data["maps"]) == 72 and len(data["maps"]["0,0"]) == data["size"] ** 2


def test_the_grid_of_a_long_text_shows_the_servers_block_maxima(page, live_server):
    """Over 112 tokens the grid asks for each 10 x 10 block's largest weight (u8), not the
    whole maps: its thumbnails and its export are those blocks, as the API pools them."""
    text = " ".join(["attention"] * 505) + " ends here."  # 510 MiniLM tokens
    asked = []
    page.on(
        "request",
        lambda r: (
            asked.append(r.post_data_json)
            if r.method == "POST" and r.url.endswith("/api/attention")
            else None
        ),
    )
    open_view(page, live_server, "explorer:grid", text=text)
    _, body = export(page, "json")
    data = json.loads(body)
    n = len(data["tokens"])
    assert n == 510 and data["cell"] == 10 and data["size"] == 51
    thumbnails = [b for b in asked if b.get("cell")]
    assert thumbnails and all(b["cell"] == 10 and b["format"] == "u8" for b in thumbnails)
    assert sorted(layer for b in thumbnails for layer in b["layers"]) == list(range(6))
    widths = page.evaluate("[...document.querySelectorAll('#grid canvas')].map((c) => c.width)")
    assert len(widths) == 72 and set(widths) == {51}
    pooled = requests.post(
        f"{live_server}/api/attention",
        json={"model": MINILM, "text": text, "layers": [3], "heads": [5], "cell": 10},
        timeout=60,
    ).json()["attentions"][0][0]
    shown = data["maps"]["3,5"]  # rounded to 4 decimals from u8
    flat = [value for row in pooled for value in row]
    assert len(shown) == len(flat) == 51 * 51
    assert max(abs(a - b) for a, b in zip(shown, flat, strict=True)) <= 1 / 510 + 1e-4


def test_a_small_heatmap_exports_vector_cells(page, live_server):
    open_view(page, live_server, "explorer:heatmap")
    wait_js(page, "document.querySelector('#heatmap').data.length > 0")
    name, body = export(page, "svg")
    assert name.endswith(".svg") and body.count(b"<rect") > 100 and b"<image" not in body


def test_a_heatmap_in_log_colours_exports_its_cells_in_log_colours(page, live_server):
    open_view(page, live_server, "explorer:heatmap")
    page.select_option("#view-heatmap [data-part=colours]", "log")
    wait_js(page, "document.querySelector('#heatmap').data[0].zmax === 0")
    _, body = export(page, "svg")
    cells = re.findall(rb'fill="(rgb\([^"]+\))"><title>[^<]*: ([0-9.e-]+)</title>', body)
    assert len(cells) > 100
    weights = [float(weight) for _, weight in cells]
    # The colours viridis gives each weight's place between 10^-6 and 1 on a log scale, and
    # (to show the two differ here) the linear scale's.
    log, linear = page.evaluate(
        """async (weights) => {
          const { viridis } = await import('/static/js/colors.js');
          const place = (w) => 1 + Math.max(-6, w > 0 ? Math.log10(w) : -6) / 6;
          return [weights.map((w) => viridis(place(w))), weights.map(viridis)];
        }""",
        weights,
    )
    assert [fill.decode() for fill, _ in cells] == log
    assert sum(a != b for a, b in zip(log, linear, strict=True)) > len(cells) / 2


def test_value_weighted_exports_its_norms_and_their_row_shares(page, live_server):
    open_view(page, live_server, "explorer:value")
    name, body = export(page, "json")
    data = json.loads(body)
    assert "value-weighted" in name and "‖α·v‖" in data["what"]
    shares, norms = data["value_weighted_shares"], data["value_weighted"]
    assert len(shares) == len(norms) == len(data["tokens"])
    for share_row, norm_row in zip(shares, norms, strict=True):
        assert abs(sum(share_row) - 1) < 1e-9
        assert all(
            abs(s - n / sum(norm_row)) < 1e-9 for s, n in zip(share_row, norm_row, strict=True)
        )
    assert data["weights"] != shares  # not the weights under another name
