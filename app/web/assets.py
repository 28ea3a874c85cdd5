"""Static assets: our own ES modules, and plotly.js and Swagger UI bundles (vendored: see
app/web/vendor/README.md)."""

from __future__ import annotations

from functools import lru_cache
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
# Swagger UI for /docs, built from npm's swagger-ui by tools/swagger-bundle for current browsers
# (swagger-ui-dist's bundle is ES5 with polyfills: its loading task 170-208 ms), in two scripts
# that the page loads in order, each run in a task of its own: swagger-client, then Swagger UI
# and the rest (in one script, one task of 166-208 ms; in two, the longer 104-151 ms).
SWAGGER_UI_VERSION = "5.33.0"
SWAGGER_UI_SCRIPTS = tuple(
    WEB_DIR / "vendor" / f"swagger-ui-atlas-{SWAGGER_UI_VERSION}.part{part}.min.js"
    for part in (1, 2)
)
SWAGGER_UI_CSS = WEB_DIR / "vendor" / f"swagger-ui-{SWAGGER_UI_VERSION}.css"
SWAGGER_UI_SHA256 = {
    SWAGGER_UI_SCRIPTS[0].name: "f3ab4e3365b3d32a58d2ab730d100798dddb8d0ad1761c238e91fc1bf747518b",
    SWAGGER_UI_SCRIPTS[1].name: "51a4d213babe8990feaaad5a9394d93c72367a9fb76bfd0d162fb43c358da6ad",
    SWAGGER_UI_CSS.name: "1ac324f7dcd27e4b9386b4bd6421271ec147e922a22c05ba24b11515e9aa6321",
}


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


def docs_assets() -> dict[str, Path]:
    """Swagger UI's scripts (in the order the page loads them) and stylesheet, by the names they
    are served under (/static/vendor/<name>)."""
    return {path.name: path for path in (*SWAGGER_UI_SCRIPTS, SWAGGER_UI_CSS)}
