"""HTML pages (Jinja2) and the vendored plotly.js bundle."""

from __future__ import annotations

from fastapi import APIRouter, HTTPException, Request
from fastapi.responses import FileResponse, HTMLResponse
from fastapi.templating import Jinja2Templates

from app.models.registry import MINILM_ID
from app.schemas.attention import EXAMPLE_TEXT, MAX_TEXT_CHARS
from app.schemas.core import SEED_EXAMPLE
from app.web.assets import PLOTLY_JS, TEMPLATES_DIR, plotly_js_name

templates = Jinja2Templates(directory=str(TEMPLATES_DIR))
templates.env.globals["plotly_js"] = plotly_js_name

router = APIRouter(include_in_schema=False)


@router.get("/static/vendor/{name}")
def vendor_plotly(name: str) -> FileResponse:
    """Only the exact bundle name resolves; nothing from the request touches the filesystem."""
    if name != plotly_js_name():
        raise HTTPException(404, detail=f"no such vendor file; plotly.js is {plotly_js_name()}")
    return FileResponse(
        PLOTLY_JS,
        media_type="text/javascript",
        headers={"Cache-Control": "public, max-age=31536000, immutable"},
    )


@router.get("/lab/step-by-step", response_class=HTMLResponse)
def step_by_step(request: Request) -> HTMLResponse:
    return templates.TemplateResponse(
        request, "step_by_step.html", {"page": "steps", "example": SEED_EXAMPLE}
    )


@router.get("/", response_class=HTMLResponse)
def explorer(request: Request) -> HTMLResponse:
    page_data = {
        "default_model": MINILM_ID,
        "example_text": EXAMPLE_TEXT,
    }
    return templates.TemplateResponse(
        request,
        "explorer.html",
        {"page": "explorer", "page_data": page_data, "max_text_chars": MAX_TEXT_CHARS},
    )


@router.get("/lab/masks", response_class=HTMLResponse)
def masks_lab(request: Request) -> HTMLResponse:
    return templates.TemplateResponse(request, "masks.html", {"page": "masks"})


@router.get("/lab/scaling", response_class=HTMLResponse)
def scaling_lab(request: Request) -> HTMLResponse:
    page_data = {"default_model": MINILM_ID, "example_text": EXAMPLE_TEXT}
    return templates.TemplateResponse(
        request, "scaling.html", {"page": "scaling", "page_data": page_data}
    )
