"""Static assets: our own ES modules and the plotly.js bundle shipped inside `plotly`."""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

import plotly
from plotly.offline import get_plotlyjs_version

ROOT = Path(__file__).resolve().parents[2]
STATIC_DIR = ROOT / "static"
TEMPLATES_DIR = ROOT / "templates"
PLOTLY_JS = Path(plotly.__file__).parent / "package_data" / "plotly.min.js"


@lru_cache
def plotly_js_name() -> str:
    """plotly-<version>.min.js, the name the bundle is served under."""
    return f"plotly-{get_plotlyjs_version()}.min.js"
