"""Issue 9.4: every view exports what it shows, named for what it is."""

import json
import re
import xml.etree.ElementTree as ET

import pytest
import requests

from tests.e2e.helpers import export, wait_js
from tests.e2e.pages import MINILM, SENTENCE, open_view

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

LOG_TICKS = ["10⁻⁶", "10⁻⁵", "10⁻⁴", "10⁻³", "10⁻²", "10⁻¹", "1"]


def png_size(body: bytes) -> tuple[int, int]:
    """A PNG's width and height, read from its IHDR header."""
    assert body[:8] == b"\x89PNG\r\n\x1a\n" and body[12:16] == b"IHDR"
    return int.from_bytes(body[16:20], "big"), int.from_bytes(body[20:24], "big")


def texts(root: ET.Element, css_class: str) -> list[str]:
    """The text of every element of an SVG (parsed: so it is well-formed XML) with this class."""
    return ["".join(e.itertext()) for e in root.iter() if css_class in e.get("class", "").split()]


def by_id(root: ET.Element, element_id: str) -> ET.Element:
    found = [e for e in root.iter() if e.get("id") == element_id]
    assert len(found) == 1, f"{len(found)} elements with id {element_id}"
    return found[0]


def open_head(page) -> str:
    """What an export's title says of the explorer's open head: "model · layer L · head H"."""
    return f"{MINILM} · layer {page.input_value('#layer')} · head {page.input_value('#head')}"


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
    head = page.input_value("#head")  # the open head, alone
    assert data["overlaid_heads"] == [int(head)]
    assert len(data["weights_by_head"][head]) == len(data["tokens"])
    assert data["weights"] == data["weights_by_head"][head]  # the open head's rows, built on export
    assert all(sum(row) == pytest.approx(1, abs=1e-5) for row in data["weights"])
    name, body = export(page, "csv")
    assert body.decode().startswith("query \\ key,[CLS]")
    name, body = export(page, "svg")
    assert name.endswith(".svg") and b"<svg" in body and b"<line" in body


def test_token_to_token_pictures_name_the_heads_overlaid_and_the_lines_hidden(page, live_server):
    open_view(page, live_server, "explorer:lines")
    layer, head = page.input_value("#layer"), int(page.input_value("#head"))
    _, body = export(page, "svg")
    svg = ET.fromstring(body)
    assert texts(svg, "figure-title") == [open_head(page)]
    assert texts(svg, "figure-text") == [f"“{SENTENCE}”"]
    notes = "".join(by_id(svg, "figure-notes").itertext())
    assert f"head {head} drawn" in notes and "lines below 0.05 hidden" in notes
    other = (head + 3) % 12
    page.check(f"#lines-heads input[value='{other}']")
    first, second = sorted([head, other])
    wait_js(
        page,
        f"document.querySelector('#lines svg').getAttribute('aria-label').includes('{first}, {second}')",
    )
    _, body = export(page, "svg")
    svg = ET.fromstring(body)
    assert texts(svg, "figure-title") == [f"{MINILM} · layer {layer} · heads {first} and {second}"]
    notes = "".join(by_id(svg, "figure-notes").itertext())
    assert f"heads {first} and {second} overlaid" in notes and f"h{first}h{second}" in notes
    _, body = export(page, "png")
    assert png_size(body)[0] >= 1600
    assert not page.errors


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
    assert name.endswith(".png") and png_size(body)[0] >= 2000
    _, body = export(page, "json")
    data = json.loads(body)
    assert len(data["maps"]) == 72 and len(data["maps"]["0,0"]) == data["size"] ** 2


def test_the_grid_exports_a_vector_map_per_head_with_labels_title_and_colour_bar(page, live_server):
    open_view(page, live_server, "explorer:grid")
    name, body = export(page, "svg")
    assert name.endswith("all-heads.svg")
    svg = ET.fromstring(body)
    assert texts(svg, "figure-title") == [f"{MINILM} · all heads: 6 layers × 12 heads"]
    assert texts(svg, "figure-text") == [f"“{SENTENCE}”"]
    maps = [e for e in svg.iter() if e.get("class") == "head-map"]
    assert len(maps) == 72 and all(len(m.findall("{*}g/{*}path")) > 0 for m in maps)
    assert "".join(maps[13].itertext()) == "layer 1, head 1"  # row-major: layers down
    labels = ["".join(e.itertext()) for e in by_id(svg, "grid-labels")]
    assert labels == [f"h{h}" for h in range(12)] + [f"L{layer}" for layer in range(6)]
    assert texts(by_id(svg, "colour-bar"), "colour-bar-tick") == ["0", "0.05", "0.25", "0.5", "1"]
    assert "colours: √weight" in texts(svg, "figure-subtitle")[-1]
    assert b"<image" not in body
    assert not page.errors


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


def test_a_small_heatmap_exports_vector_cells_under_a_title_with_a_colour_bar(page, live_server):
    open_view(page, live_server, "explorer:heatmap")
    wait_js(page, "document.querySelector('#heatmap').data.length > 0")
    name, body = export(page, "svg")
    assert name.endswith(".svg") and body.count(b"<rect") > 100 and b"<image" not in body
    svg = ET.fromstring(body)
    assert texts(svg, "figure-title") == [open_head(page)]
    assert texts(svg, "figure-text") == [f"“{SENTENCE}”"]
    assert texts(svg, "figure-subtitle") == ["rows: queries, columns: keys"]
    bar = by_id(svg, "colour-bar")
    assert texts(bar, "colour-bar-label") == ["weight"]
    assert texts(bar, "colour-bar-tick") == ["0", "0.25", "0.5", "0.75", "1"]
    assert b"log" not in body
    cells = [
        r
        for r in by_id(svg, "heatmap").iter()
        if r.tag.endswith("rect") and r.find("*") is not None
    ]
    assert cells and all(r.get("width") == r.get("height") for r in cells)  # square cells
    ratio = float(svg.get("width")) / float(svg.get("height"))
    _, body = export(page, "png")
    width, height = png_size(body)
    assert width >= 1600  # slide size
    assert abs(width / height - ratio) < 0.01  # issue 49.9: that SVG, square cells, not Plotly's
    assert not page.errors


def test_a_heatmap_in_log_colours_exports_its_cells_in_log_colours(page, live_server):
    open_view(page, live_server, "explorer:heatmap")
    page.select_option("#head", "0")  # a head that spreads its weight: log and linear differ
    page.select_option("#view-heatmap [data-part=colours]", "log")
    wait_js(page, "document.querySelector('#heatmap').layout.title.text.includes('head 0')")
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
    svg = ET.fromstring(body)
    assert texts(svg, "figure-subtitle") == [
        "rows: queries, columns: keys · log colours, 10⁻⁶ to 1"
    ]
    assert texts(by_id(svg, "colour-bar"), "colour-bar-tick") == LOG_TICKS


def test_a_long_heatmap_exports_plotlys_picture_titled_with_its_log_colour_bar(page, live_server):
    """Above 128 tokens the SVG (and the PNG drawn from it) is Plotly's: the map an embedded
    image, the title, the text cut short and the colour bar (named log) drawn into it."""
    text = " ".join(["attention"] * 140)
    open_view(page, live_server, "explorer:heatmap", text=text)
    page.select_option("#view-heatmap [data-part=colours]", "log")
    wait_js(page, "document.querySelector('#heatmap').data[0].zmax === 0")
    _, body = export(page, "svg")
    svg = body.decode()
    assert "<image" in svg and 'image-rendering="optimizeSpeed"' in svg  # cells stay sharp
    assert f"{open_head(page)}" in svg and "“attention attention" in svg and "…”" in svg
    assert "log colours, 10⁻⁶ to 1" in svg and "weight (log)" in svg
    assert re.search(r'class="[^"]*\bcolorbar\b', svg) and all(tick in svg for tick in LOG_TICKS)
    _, body = export(page, "png")
    assert png_size(body)[0] >= 1600
    assert not page.errors


def test_a_text_with_markup_exports_as_text(page, live_server):
    text = 'Say <b>"hi"</b> & <script>x</script> now'
    open_view(page, live_server, "explorer:heatmap", text=text)
    wait_js(page, "document.querySelector('#heatmap').data.length > 0")
    _, body = export(page, "svg")
    svg = ET.fromstring(body)  # well-formed: every token and the text escaped
    assert texts(svg, "figure-text") == [f"“{text}”"]
    assert not [e for e in svg.iter() if e.tag.split("}")[-1] in ("b", "script")]
    assert not page.errors


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
