"""HTML pages (Jinja2) and the vendored plotly.js and Swagger UI files."""

from __future__ import annotations

from urllib.parse import urlencode

from fastapi import APIRouter, HTTPException, Request
from fastapi.responses import FileResponse, HTMLResponse, RedirectResponse, Response
from fastapi.templating import Jinja2Templates

from app.deps import SettingsDep
from app.web.assets import (
    PLOTLY_JS,
    SWAGGER_UI_CSS,
    SWAGGER_UI_SCRIPTS,
    TEMPLATES_DIR,
    docs_assets,
    plotly_js_name,
    served_script,
)
from app.web.explorer_views import GROUPS, page_fields, page_views, views_taught_by
from app.web.explorer_views import VIEWS as EXPLORER_VIEWS
from app.web.glossary import TERMS
from atlas_engine.lab_topics import LAB_TOPICS, PARTS, neighbours
from atlas_engine.models.loader import FULL_MAPS_MAX_TOKENS
from atlas_engine.models.registry import MINILM_ID, SMOLLM2_ID
from atlas_engine.models.vision_weights import BACKBONE_CONFIG, PREPROCESSOR_CONFIG
from atlas_engine.schemas.attention import EXAMPLE_TEXT, MAX_TEXT_CHARS
from atlas_engine.schemas.core import SEED_EXAMPLE
from atlas_engine.schemas.generate import MAX_NEW_TOKENS
from atlas_engine.schemas.lab_models import MAX_LAB_REAL_TOKENS
from atlas_engine.schemas.training import TrainRequest
from atlas_engine.services.lessons import get_lesson, lessons
from atlas_engine.vision.images import MAX_IMAGE_BYTES, MAX_IMAGE_PIXELS
from atlas_engine.vision.models import IMAGE_MODEL_ID
from atlas_engine.vision.samples import SAMPLES
from attention_core.head_stats import DESCRIPTIONS, LABELS
from attention_core.headvis import DESCRIPTIONS as HEADVIS_DESCRIPTIONS
from attention_core.headvis import LABELS as HEADVIS_LABELS
from attention_core.training import MAX_STEPS, PHASE_CHANGE_SCORE

templates = Jinja2Templates(directory=str(TEMPLATES_DIR))
templates.env.globals["plotly_js"] = plotly_js_name
templates.env.globals["lab_topics"] = LAB_TOPICS

router = APIRouter(include_in_schema=False)


def glossary_data() -> dict[str, list[str]]:
    """{term: [label, gloss, pattern]}: what glossary.js needs to gloss a page's text."""
    return {key: [term.label, term.gloss, term.pattern] for key, term in TERMS.items()}


templates.env.globals["glossary_data"] = glossary_data


# Where the explorer shows a lab topic best on a real model, beyond its view's defaults (a
# causal mask needs a decoder; RoPE's previous-token head is SmolLM2's layer 16 head 0).
LAB_LINK_STATE = {
    ("masks", "mask"): {"model": SMOLLM2_ID},
    ("positions", "heatmap"): {"model": SMOLLM2_ID, "layer": 16, "head": 0},
}
ZOOM_TOPICS = ("tiling", "cost")  # taught on the whole context, which Deep zoom reads


def lab_course(slug: str) -> dict:
    """Where a lab topic sits in the course: its part, number, neighbours, and the links to
    where the explorer or Deep zoom shows its idea on a real model: [(label, href)]."""
    previous, following = neighbours(slug)
    links = [
        (
            f"the explorer's {view.label} view",
            "/?" + urlencode({**LAB_LINK_STATE.get((slug, name), {}), "view": name}),
        )
        for name, view in views_taught_by(slug)
    ]
    if slug in ZOOM_TOPICS:
        links.append(("Deep zoom, over SmolLM2's whole context", "/zoom"))
    return {
        "part": PARTS[LAB_TOPICS[slug].part],
        "number": list(LAB_TOPICS).index(slug) + 1,
        "total": len(LAB_TOPICS),
        "previous": previous,
        "next": following,
        "links": links,
    }


templates.env.globals["lab_course"] = lab_course
templates.env.globals["lab_parts"] = PARTS


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


@page("/learn", response_class=HTMLResponse)
def learn(request: Request, settings: SettingsDep) -> HTMLResponse:
    found = lessons(settings.lessons_dir)
    return templates.TemplateResponse(
        request,
        "learn.html",
        {
            "page": "learn",
            "lessons": found,
            "first_lesson": next(iter(found)),
            "page_data": {"example": "attention-basics"},
        },
    )


@page("/learn/pasted", response_class=HTMLResponse)
def pasted_lesson(request: Request) -> HTMLResponse:
    """A lesson carried whole in the link's fragment (#lesson=...), never sent to the server."""
    return templates.TemplateResponse(
        request, "lesson.html", {"page": "lesson", "page_data": {"id": None}}
    )


@page("/learn/{lesson_id}", response_class=HTMLResponse)
def lesson_page(request: Request, settings: SettingsDep, lesson_id: str) -> HTMLResponse:
    get_lesson(settings.lessons_dir, lesson_id)  # 404: a page listing the lessons there are
    return templates.TemplateResponse(
        request, "lesson.html", {"page": "lesson", "page_data": {"id": lesson_id}}
    )


def not_found_page(request: Request, detail: str) -> HTMLResponse:
    """The 404 a browser gets for a page (atlas_engine.errors sends API paths JSON): what was not found,
    the lessons where a lesson was asked for, and the ways in (Learn, the lab, the explorer)."""
    path = request.url.path
    lesson = path.removeprefix("/learn/") if path.startswith("/learn/") else None
    found = lessons(request.app.state.settings.lessons_dir) if lesson is not None else {}
    return templates.TemplateResponse(
        request,
        "not_found.html",
        {
            "page": "not-found",
            "path": path,
            "lesson": lesson,
            "lessons": found,
            # the route's own sentence, where it says more than Starlette's "Not Found"
            "detail": detail if detail != "Not Found" and lesson is None else None,
        },
        status_code=404,
    )


@page("/glossary", response_class=HTMLResponse)
def glossary(request: Request) -> HTMLResponse:
    return templates.TemplateResponse(
        request, "glossary.html", {"page": "glossary", "terms": TERMS}
    )


@page("/", response_class=HTMLResponse)
def explorer(request: Request) -> HTMLResponse:
    page_data = {
        "default_model": MINILM_ID,
        "example_text": EXAMPLE_TEXT,
        "max_text_chars": MAX_TEXT_CHARS,
        "views": page_views(),
        "fields": page_fields(),
        "labs": {
            name: [
                {"slug": slug, "title": LAB_TOPICS[slug].title}
                for slug in view.labs
                if slug in LAB_TOPICS
            ]
            for name, view in EXPLORER_VIEWS.items()
        },
    }
    return templates.TemplateResponse(
        request,
        "explorer.html",
        {
            "page": "explorer",
            "page_data": page_data,
            "explorer_groups": GROUPS,
            "explorer_views": EXPLORER_VIEWS,
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
            # [name, what it measures] in STATISTICS' order (tojson would sort a dict's keys);
            # a text longer than the explorer takes opens in log colours
            "page_data": {
                "default_model": SMOLLM2_ID,
                "statistics": list(DESCRIPTIONS.items()),
                "log_colours_above": FULL_MAPS_MAX_TOKENS,
                "max_text_chars": MAX_TEXT_CHARS,
            },
            "log_colours_above": FULL_MAPS_MAX_TOKENS,
            "max_text_chars": MAX_TEXT_CHARS,
        },
    )


# The corpus pages' statistics: Atlas's own, then HeadVis's six (attention_core.headvis).
CORPUS_STATISTICS = [*DESCRIPTIONS.items(), *HEADVIS_DESCRIPTIONS.items()]
CORPUS_LABELS = {**LABELS, **HEADVIS_LABELS}


@page("/head/{model:path}/{layer:int}/{head:int}", response_class=HTMLResponse)
def head_page(request: Request, model: str, layer: int, head: int) -> HTMLResponse:
    """One head over a corpus (its dashboard): a stable link per model, layer and head."""
    return templates.TemplateResponse(
        request,
        "head.html",
        {
            "page": "head",
            "page_data": {
                "model": model,
                "layer": layer,
                "head": head,
                "statistics": CORPUS_STATISTICS,
                "labels": CORPUS_LABELS,
            },
        },
    )


@page("/heads/{model:path}", response_class=HTMLResponse)
def corpus_heads_page(request: Request, model: str) -> HTMLResponse:
    """Every head of a model over a corpus: a scatter on any two statistics and a finder."""
    return templates.TemplateResponse(
        request,
        "heads_corpus.html",
        {
            "page": "corpus-heads",
            "page_data": {
                "model": model,
                "statistics": CORPUS_STATISTICS,
                "labels": CORPUS_LABELS,
            },
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


@page("/lab/induction", response_class=HTMLResponse)
def induction_lab(request: Request) -> HTMLResponse:
    defaults = TrainRequest().model_dump()
    page_data = {
        "defaults": defaults,  # the knobs a link leaves out
        "max_steps": MAX_STEPS,
        "max_seed": 2**31 - 1,
        "phase_score": PHASE_CHANGE_SCORE,  # a later head's induction score past it
    }
    return templates.TemplateResponse(
        request, "lab_induction.html", {"page": "induction", "page_data": page_data}
    )


@page("/image", response_class=HTMLResponse)
def image_page(request: Request) -> HTMLResponse:
    model = request.query_params.get("model") or IMAGE_MODEL_ID
    page_data = {
        "model": model,  # the embedded one unless a link names another
        "samples": {name: {"title": s.title} for name, s in SAMPLES.items()},
        "max_mb": MAX_IMAGE_BYTES // 2**20,
        "max_megapixels": MAX_IMAGE_PIXELS // 10**6,
        "image_size": PREPROCESSOR_CONFIG["crop_size"]["height"],  # the embedded model's
        "patch": BACKBONE_CONFIG["patch_size"],
    }
    return templates.TemplateResponse(
        request, "image.html", {"page": "image", "page_data": page_data}
    )


@page("/lab", response_class=HTMLResponse)
def lab_index(request: Request) -> HTMLResponse:
    return templates.TemplateResponse(request, "lab_index.html", {"page": "lab"})


TOPICS_WITH_OWN_ROUTE = ("step-by-step", "masks", "scaling", "induction")  # their routes are above


def _topic_page(slug: str):
    def page(request: Request) -> HTMLResponse:
        page_data = {
            "example_text": EXAMPLE_TEXT,
            "minilm": MINILM_ID,
            "smollm2": SMOLLM2_ID,
            "lab_tokens": MAX_LAB_REAL_TOKENS,  # the longest text a lab page runs a model on
        }
        return templates.TemplateResponse(
            request, f"lab_{slug}.html", {"page": slug, "page_data": page_data}
        )

    page.__name__ = f"lab_{slug}"
    return page


for _slug in (s for s in LAB_TOPICS if s not in TOPICS_WITH_OWN_ROUTE):
    router.add_api_route(f"/lab/{_slug}", _topic_page(_slug), response_class=HTMLResponse)
