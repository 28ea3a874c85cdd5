"""The facts the pages are built from, each written once: the explorer's views and their
groups, the lab's course, the glossary (issue 37)."""

import json
import re

from app.web.explorer_views import GROUPS, PAGE_FIELDS, VIEWS, views_taught_by, widget_views
from app.web.glossary import TERMS
from atlas_engine.lab_topics import LAB_TOPICS, PARTS, neighbours
from attention_atlas.bundle import MAPS_VIEWS
from tests.support.live import REPO

JS = REPO / "app" / "web" / "static" / "js"
PARTIALS = REPO / "app" / "web" / "templates" / "views"


def test_every_view_has_a_group_a_panel_and_a_module(client):
    page = client.get("/").text
    for name, view in VIEWS.items():
        assert view.group in GROUPS
        assert f'id="view-{name}"' in page and f'id="tab-{name}"' in page
        assert re.search(
            r"export (async )?function render\(", (JS / "views" / f"{name}.js").read_text()
        )
        partial = (PARTIALS / f"{name}.html").read_text()
        assert partial.startswith(f'<section role="tabpanel" id="view-{name}"'), name
        assert all(slug in LAB_TOPICS for slug in view.labs), name
    assert len(VIEWS) == 22 and all(any(v.group == g for v in VIEWS.values()) for g in GROUPS)


def test_each_group_fits_one_row_at_390_px():
    """A group's views must be few enough to show as one row of tabs on a phone (the row
    scrolls sideways past that, but a group of more than five is a sign to split it)."""
    for group in GROUPS:
        assert 2 <= sum(v.group == group for v in VIEWS.values()) <= 5, group


def test_the_lab_is_a_course_that_starts_with_a_head_and_a_forward_pass(client):
    order = list(LAB_TOPICS)
    assert order[:2] == ["what-a-head-is", "forward-pass"]
    assert neighbours(order[0]) == (None, order[1]) and neighbours(order[-1])[1] is None
    assert {topic.part for topic in LAB_TOPICS.values()} == set(PARTS)
    page = client.get("/lab/masks").text
    assert 'rel="prev" href="/lab/forward-pass"' not in page  # its own neighbours, not others'
    previous, following = neighbours("masks")
    assert (
        f'rel="prev" href="/lab/{previous}"' in page
        and f'rel="next" href="/lab/{following}"' in page
    )
    assert "/?model=HuggingFaceTB%2FSmolLM2-135M-Instruct&amp;view=mask" in page  # a causal mask
    assert [name for name, _ in views_taught_by("masks")] == ["mask"]


def test_every_glossary_term_has_a_gloss_and_a_formula_or_a_picture(client):
    page = client.get("/glossary").text
    for key, term in TERMS.items():
        assert re.fullmatch(r"[a-z0-9-]+", key), key  # an id in a link
        assert term.gloss and len(term.gloss) <= 160 and term.pattern
        assert term.formula or term.picture, key
        assert f'id="{key}"' in page


def test_the_first_group_offers_no_view_that_no_shipped_model_can_use():
    """Issue 49.5: Decoder & cross needs an encoder-decoder, and none ships: not a first view."""
    first = next(iter(GROUPS))
    assert VIEWS["decoder"].group != first
    assert [name for name, view in VIEWS.items() if view.group == first] == [
        "heatmap", "lines", "qkspace",
    ]  # fmt: skip


def test_the_page_state_is_built_from_the_registry_rows(client):
    """Each view's URL fields are in its row (app/web/explorer_views.py), none in a shared JS
    table: the page's data carries them, and no two share a state key or a URL parameter."""
    page = client.get("/").text
    data = json.loads(re.search(r'id="page-data">(.*?)</script>', page, re.S).group(1))
    fields = [*PAGE_FIELDS, *(f for view in VIEWS.values() for f in view.fields)]
    assert [f["key"] for f in data["fields"]] == [f.key for f in fields]
    assert len({f.key for f in fields}) == len({f.param for f in fields}) == len(fields)
    assert all(f.type in {"text", "int", "number", "flag", "ints", "choice"} for f in fields)
    state_js = (JS / "state.js").read_text()
    assert not any(f'"{f.param}"' in state_js for f in VIEWS["patching"].fields)


def test_the_widget_offers_the_views_its_row_says_it_does():
    offered = {name for kind in ("maps", "replay", "writes") for name, _ in widget_views(kind)}
    assert offered == {name for name, view in VIEWS.items() if view.widget}
    assert all(view.widget in {"", "maps", "replay", "writes"} for view in VIEWS.values())
    assert MAPS_VIEWS[0][0] == "heatmap"  # the one view of cross-attention


def test_a_new_view_needs_its_row_its_module_and_its_partial_and_nothing_else():
    """Issue 51.5: a view is its registry row, static/js/views/<name>.js and
    templates/views/<name>.html. No other front-end file lists the views or names one as a view
    (a partial, a module loaded as a view, `view: "<name>"`, a comparison, a literal list, the
    imports of several views' modules; a page may import one view module's helpers): the
    explorer, the widget, the tabs and the links read the registry's rows, so a hard-coded list
    added again fails here."""
    templates = REPO / "app" / "web" / "templates"
    for name in VIEWS:
        assert (JS / "views" / f"{name}.js").is_file(), name
        assert (templates / "views" / f"{name}.html").is_file(), name
    names = "|".join(VIEWS)
    quoted = rf"""["'`]({names})["'`]"""
    as_view = re.compile(
        rf"views/({names})\.html"  # a partial included by name
        rf"|import\(\s*[\"'`][^\"'`]*views/({names})\.js"  # a view's module loaded by name
        rf"|\bview\s*(:|[!=]==?)\s*{quoted}"  # a view chosen or compared by name
        rf"|\[\s*{quoted}\s*,\s*{quoted}"  # a list of views
    )
    shared = [
        *(p for p in JS.rglob("*.js") if p.parent != JS / "views"),
        *(p for p in templates.rglob("*.html") if p.parent != templates / "views"),
    ]
    assert len(shared) > 20
    for path in shared:
        source = path.read_text()
        found = as_view.search(source)
        assert not found, (str(path.relative_to(REPO)), found and found.group(0))
        imported = set(re.findall(rf"views/({names})\.js", source))
        assert len(imported) <= 1, (str(path.relative_to(REPO)), imported)
    for path in [JS / "pages" / "explorer.js", *(JS / "explorer").glob("*.js")]:
        # issue 51: the page's modules stay small (lines as Biome formats them at 120 columns)
        assert len(path.read_text().splitlines()) <= 350, path.name
