"""Static assets: our own ES modules and a plotly.js bundle (vendored: see
app/web/vendor/README.md)."""

from __future__ import annotations

import importlib.util
from functools import lru_cache
from importlib.metadata import version
from pathlib import Path

WEB_DIR = Path(__file__).resolve().parent  # package data: a wheel carries them (pyproject)
STATIC_DIR = WEB_DIR / "static"
TEMPLATES_DIR = WEB_DIR / "templates"
# plotly.js's core with the trace types the pages draw (scatter, bar, heatmap), built from npm's
# plotly.js by tools/plotly-bundle: the page's loading task went from 210-285 ms with npm's
# cartesian bundle to under 50 ms here (its box, contour, pie ... and world calendars set up on
# every load).
PLOTLY_JS_VERSION = "4.1.1"
PLOTLY_JS = WEB_DIR / "vendor" / f"plotly-atlas-{PLOTLY_JS_VERSION}.min.js"
PLOTLY_JS_SHA256 = "d9dde5b08ebed9d5677f01d76829d3a6290fdd754ce0b18f365574fe80f196da"


COMPILE_HINT = "//# allFunctionsCalledOnLoad\n"
"""Put before every vendored script when it is served (the files themselves stay as built or
shipped): V8's explicit compile hint, which compiles every function of the script eagerly while
it streams in, off the main thread, instead of lazily on the main thread as each is first called
(plotly.js and Swagger UI call most of theirs on load). plotly.js's loading task: npm's cartesian
bundle 210-285 ms without it, 141-203 ms with it; ours 51-72 ms without, under 50 ms with."""


@lru_cache
def served_script(path: Path) -> bytes:
    """A vendored script as the server sends it: the compile hint, then the file unchanged."""
    return COMPILE_HINT.encode("ascii") + path.read_bytes()


def plotly_js_name() -> str:
    """plotly-atlas-<version>.min.js, the name the bundle is served under."""
    return PLOTLY_JS.name


@lru_cache
def docs_assets() -> dict[str, Path]:
    """Swagger UI as shipped by the fastapi-offline package (no CDN), by the name they
    are served under: /static/vendor/<name>, the package's version in each name."""
    spec = importlib.util.find_spec("fastapi_offline")
    if spec is None or not spec.submodule_search_locations:
        return {}
    folder = Path(next(iter(spec.submodule_search_locations))) / "static"
    tag = f"fastapi-offline-{version('fastapi-offline')}"
    files = ("swagger-ui-bundle.js", "swagger-ui.css")
    return {f"{tag}-{name}": folder / name for name in files if (folder / name).is_file()}


def docs_asset_name(file: str) -> str:
    """The served name of one docs file, e.g. docs_asset_name("swagger-ui.css")."""
    return next(name for name in docs_assets() if name.endswith(file))
