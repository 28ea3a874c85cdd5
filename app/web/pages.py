"""HTML pages (Jinja2) and the vendored plotly.js and Swagger UI files."""

from __future__ import annotations

from fastapi import APIRouter, HTTPException, Request
from fastapi.responses import FileResponse, HTMLResponse, RedirectResponse, Response
from fastapi.templating import Jinja2Templates

from app.models.registry import MINILM_ID, SMOLLM2_ID
from app.schemas.attention import EXAMPLE_TEXT, MAX_TEXT_CHARS
from app.schemas.core import SEED_EXAMPLE
from app.schemas.generate import MAX_NEW_TOKENS
from app.services.heads import DESCRIPTIONS
from app.web.assets import (
    PLOTLY_JS,
    SWAGGER_UI_CSS,
    SWAGGER_UI_SCRIPTS,
    TEMPLATES_DIR,
    docs_assets,
    plotly_js_name,
    served_script,
)
from app.web.lab_topics import LAB_TOPICS

templates = Jinja2Templates(directory=str(TEMPLATES_DIR))
templates.env.globals["plotly_js"] = plotly_js_name
templates.env.globals["lab_topics"] = LAB_TOPICS

router = APIRouter(include_in_schema=False)


def page(path: str, **options):
    """A route of this router answering GET and HEAD (curl -I, link checkers, uptime probes),
    as the static files beside it do."""
    return router.api_route(path, methods=["GET", "HEAD"], **options)


VENDOR_TYPES = {".js": "text/javascript", ".css": "text/css"}


@page("/static/vendor/{name}")
def vendor_file(name: str) -> Response:
    """plotly.js and the API docs' Swagger UI, vendored in app/web/vendor. Only exact,
    versioned names resolve; nothing from the request touches the filesystem."""
    files = {plotly_js_name(): PLOTLY_JS, **docs_assets()}
    path = files.get(name)
    if path is None:
        raise HTTPException(404, detail=f"no such vendor file; there are {sorted(files)}")
    headers = {"Cache-Control": "public, max-age=31536000, immutable"}
    if path.suffix == ".js":  # after V8's compile hint (app.web.assets.COMPILE_HINT)
        return Response(served_script(path), media_type=VENDOR_TYPES[".js"], headers=headers)
    return FileResponse(path, media_type=VENDOR_TYPES[path.suffix], headers=headers)


@page("/docs", response_class=HTMLResponse)
def api_docs(request: Request) -> HTMLResponse:
    """Swagger UI, served from this server; its start-up script is a static file (strict CSP)."""
    return templates.TemplateResponse(
        request,
        "api_docs.html",
        {
            "swagger_scripts": [path.name for path in SWAGGER_UI_SCRIPTS],
            "swagger_css": SWAGGER_UI_CSS.name,
        },
    )


@page("/redoc")
def api_redoc() -> RedirectResponse:
    """ReDoc loads its logo from a CDN whatever it is told; the one docs UI is /docs."""
    return RedirectResponse("/docs", status_code=308)


@page("/lab/step-by-step", response_class=HTMLResponse)
def step_by_step(request: Request) -> HTMLResponse:
    return templates.TemplateResponse(
        request, "step_by_step.html", {"page": "step-by-step", "example": SEED_EXAMPLE}
    )


@page("/", response_class=HTMLResponse)
def explorer(request: Request) -> HTMLResponse:
    page_data = {
        "default_model": MINILM_ID,
        "example_text": EXAMPLE_TEXT,
    }
    return templates.TemplateResponse(
        request,
        "explorer.html",
        {
            "page": "explorer",
            "page_data": page_data,
            "max_text_chars": MAX_TEXT_CHARS,
            "max_new_tokens": MAX_NEW_TOKENS,
        },
    )


@page("/zoom", response_class=HTMLResponse)
def deep_zoom(request: Request) -> HTMLResponse:
    return templates.TemplateResponse(
        request,
        "zoom.html",
        {
            "page": "zoom",
            # [name, what it measures] in STATISTICS' order (tojson would sort a dict's keys)
            "page_data": {"default_model": SMOLLM2_ID, "statistics": list(DESCRIPTIONS.items())},
            "max_text_chars": MAX_TEXT_CHARS,
        },
    )


@page("/lab/masks", response_class=HTMLResponse)
def masks_lab(request: Request) -> HTMLResponse:
    return templates.TemplateResponse(request, "masks.html", {"page": "masks"})


@page("/lab/scaling", response_class=HTMLResponse)
def scaling_lab(request: Request) -> HTMLResponse:
    page_data = {"default_model": MINILM_ID, "example_text": EXAMPLE_TEXT}
    return templates.TemplateResponse(
        request, "scaling.html", {"page": "scaling", "page_data": page_data}
    )


@page("/lab", response_class=HTMLResponse)
def lab_index(request: Request) -> HTMLResponse:
    return templates.TemplateResponse(request, "lab_index.html", {"page": "lab"})


TOPICS_WITH_OWN_ROUTE = ("step-by-step", "masks", "scaling")  # their routes are above


def _topic_page(slug: str):
    def page(request: Request) -> HTMLResponse:
        page_data = {"example_text": EXAMPLE_TEXT, "minilm": MINILM_ID, "smollm2": SMOLLM2_ID}
        return templates.TemplateResponse(
            request, f"lab_{slug}.html", {"page": slug, "page_data": page_data}
        )

    page.__name__ = f"lab_{slug}"
    return page


for _slug in (s for s in LAB_TOPICS if s not in TOPICS_WITH_OWN_ROUTE):
    router.add_api_route(f"/lab/{_slug}", _topic_page(_slug), response_class=HTMLResponse)
