"""The web app's own front-end files, packed for a notebook: the widget's ES module with every
import inlined, the app's stylesheet scoped to the widget, plotly.js, and the views' markup.

Nothing is copied or built ahead: each piece is read from app/web/static/ and app/web/templates/
when a widget is first made, so the notebook shows exactly the views the web app shows.
"""

from __future__ import annotations

import base64
import re
from functools import lru_cache
from pathlib import Path

from jinja2 import Environment, FileSystemLoader, select_autoescape

from app.web.assets import PLOTLY_JS, STATIC_DIR, TEMPLATES_DIR, served_script
from app.web.explorer_views import widget_views

# The views the widget offers, by what they need (the explorer's registry): [(name, label)].
MAPS_VIEWS = widget_views("maps")
REPLAY_VIEWS = widget_views("replay")
WRITES_VIEWS = widget_views("writes")

JS_DIR = STATIC_DIR / "js"
RELATIVE_IMPORT = re.compile(r"""(\bfrom\s*|\bimport\s*)(["'])(\.{1,2}/[^"']+)\2""")


def _inlined(path: Path, urls: dict[Path, str], visiting: set[Path]) -> str:
    """The module's source with each relative import replaced by its dependency's data: URL
    (a data: URL has no base to resolve './x.js' against, so every level is inlined)."""
    if path in visiting:
        raise ValueError(f"import cycle through {path.name}: the widget cannot inline it")
    visiting.add(path)

    def replace(match: re.Match) -> str:
        target = (path.parent / match.group(3)).resolve()
        if target not in urls:
            urls[target] = _data_url(_inlined(target, urls, visiting))
        return f"{match.group(1)}{match.group(2)}{urls[target]}{match.group(2)}"

    source = RELATIVE_IMPORT.sub(replace, path.read_text(encoding="utf-8"))
    visiting.discard(path)
    return source


@lru_cache
def widget_esm(name: str = "widget.js") -> str:
    """static/js/<name> (the explorer's widget, or image-widget.js) as one self-contained
    module, a str of JavaScript (its imports are data: URLs, and one module imported twice is
    one URL, so it is evaluated once)."""
    return _inlined((JS_DIR / name).resolve(), {}, set())


@lru_cache
def view_modules() -> dict[str, str]:
    """Each view the widget offers (the registry's rows with a `widget` need), as
    {name: static/js/views/<name>.js as a data: URL}: the widget imports them by these names,
    so it keeps no list of its own. Their imports are inlined as widget_esm's are; a data: URL
    is its module's text, so a module that several import is one URL, evaluated once."""
    offered = [name for kind in ("maps", "replay", "writes") for name, _ in widget_views(kind)]
    urls: dict[Path, str] = {}
    return {
        name: _data_url(_inlined((JS_DIR / "views" / f"{name}.js").resolve(), urls, set()))
        for name in offered
    }


def _data_url(source: str) -> str:
    encoded = base64.b64encode(source.encode("utf-8")).decode("ascii")
    return f"data:text/javascript;base64,{encoded}"


@lru_cache
def widget_css() -> str:
    """app.css nested under .atlas-widget, a str of CSS, so it styles the widget and nothing
    else of the notebook (its :root variables and body rules apply to the widget's own
    element)."""
    css = (STATIC_DIR / "css" / "app.css").read_text(encoding="utf-8")
    css = re.sub(r"(?m)^(:root|body)(?=\s*\{)", "&", css)
    return ".atlas-widget {\n" + css + "\n}\n"


@lru_cache
def plotly_js() -> str:
    """The plotly.js bundle as the web app serves it, a str (app/web/vendor, with its compile
    hint)."""
    return served_script(PLOTLY_JS).decode("utf-8")


@lru_cache
def _templates() -> Environment:
    return Environment(
        loader=FileSystemLoader(TEMPLATES_DIR), autoescape=select_autoescape(["html"])
    )


_ID_ATTRIBUTE = re.compile(r'\b(id|for|aria-controls|aria-labelledby|aria-describedby)="([^"]+)"')


def panels_html(views: list[tuple[str, str]], title: str, note: str, prefix: str = "") -> str:
    """The widget's markup, a str of HTML: a layer and head picker and the explorer's panels
    for `views` ([(view name, label)]).

    Every id, and every attribute that names one, gets `prefix`, so several widgets on one
    page (a notebook's outputs) never share an id."""
    html = _templates().get_template("widget.html").render(views=views, title=title, note=note)
    return _ID_ATTRIBUTE.sub(
        lambda m: f'{m[1]}="{" ".join(prefix + name for name in m[2].split())}"', html
    )
