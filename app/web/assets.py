"""Static assets: our own ES modules and plotly.js's cartesian bundle (vendored: see
app/web/vendor/README.md)."""

from __future__ import annotations

import importlib.util
from functools import lru_cache
from importlib.metadata import version
from pathlib import Path

WEB_DIR = Path(__file__).resolve().parent  # package data: a wheel carries them (pyproject)
STATIC_DIR = WEB_DIR / "static"
TEMPLATES_DIR = WEB_DIR / "templates"
# npm's plotly.js-cartesian-dist-min: every trace type Atlas draws (heatmap, scatter, bar) in a
# third of the full bundle, which the browser evaluates in half the time (0.75 s, not 1.6 s here).
PLOTLY_JS_VERSION = "4.1.1"
PLOTLY_JS = WEB_DIR / "vendor" / f"plotly-cartesian-{PLOTLY_JS_VERSION}.min.js"
PLOTLY_JS_SHA256 = "79542150855a52c567260e3137095dbe2b744e6d702a5cabe67da246942fba7a"


def plotly_js_name() -> str:
    """plotly-cartesian-<version>.min.js, the name the bundle is served under."""
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
