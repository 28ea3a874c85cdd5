"""Static assets: our own ES modules and the plotly.js bundle shipped inside `plotly`."""

from __future__ import annotations

import importlib.util
from functools import lru_cache
from importlib.metadata import version
from pathlib import Path

import plotly
from plotly.offline import get_plotlyjs_version

WEB_DIR = Path(__file__).resolve().parent  # package data: a wheel carries them (pyproject)
STATIC_DIR = WEB_DIR / "static"
TEMPLATES_DIR = WEB_DIR / "templates"
PLOTLY_JS = Path(plotly.__file__).parent / "package_data" / "plotly.min.js"


@lru_cache
def plotly_js_name() -> str:
    """plotly-<version>.min.js, the name the bundle is served under."""
    return f"plotly-{get_plotlyjs_version()}.min.js"


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
