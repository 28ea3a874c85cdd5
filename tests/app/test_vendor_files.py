"""The vendored plotly.js and Swagger UI bundles: the pinned files, plotly.js holding every trace
type the pages draw."""

import hashlib
import re

from fastapi.testclient import TestClient

from app.web.assets import (
    COMPILE_HINT,
    PLOTLY_JS,
    PLOTLY_JS_SHA256,
    PLOTLY_JS_VERSION,
    STATIC_DIR,
    SWAGGER_UI_SCRIPTS,
    SWAGGER_UI_SHA256,
    SWAGGER_UI_VERSION,
    docs_assets,
)

# `type: "..."` values in the front end that are not trace types: axes, shapes, inputs, and the
# URL fields' types of state.js (bool, int, ints, choice, text).
NOT_TRACE_TYPES = {
    "bool",
    "button",
    "category",
    "checkbox",
    "choice",
    "date",
    "int",
    "ints",
    "line",
    "linear",
    "log",
    "rect",
    "text",
}


def bundled_trace_types() -> set[str]:
    return set(re.findall(r'moduleType:"trace",name:"(\w+)"', PLOTLY_JS.read_text("utf-8")))


def drawn_trace_types() -> set[str]:
    named = set()
    for module in STATIC_DIR.rglob("*.js"):
        named |= set(re.findall(r'\btype: "(\w+)"', module.read_text("utf-8")))
    return named - NOT_TRACE_TYPES


def test_the_bundle_is_the_pinned_file_of_its_version():
    assert hashlib.sha256(PLOTLY_JS.read_bytes()).hexdigest() == PLOTLY_JS_SHA256
    assert (
        f"plotly.js (atlas: scatter, bar, heatmap - minified) v{PLOTLY_JS_VERSION}"
        in PLOTLY_JS.read_text("utf-8")[:300]
    )


def test_every_trace_type_the_pages_draw_is_in_the_bundle():
    drawn = drawn_trace_types()
    assert {"heatmap", "scatter", "bar"} <= drawn  # the scan finds them
    assert drawn <= bundled_trace_types(), drawn - bundled_trace_types()


def test_the_bundle_is_served_under_its_versioned_name_and_cached_for_good(client: TestClient):
    page = client.get("/")
    name = f"plotly-atlas-{PLOTLY_JS_VERSION}.min.js"
    assert f"/static/vendor/{name}" in page.text
    answer = client.get(f"/static/vendor/{name}")
    assert answer.status_code == 200
    # the pinned file, after V8's compile hint on a line of its own
    assert answer.content == b"//# allFunctionsCalledOnLoad\n" + PLOTLY_JS.read_bytes()
    assert answer.headers["content-type"].startswith("text/javascript")
    assert "immutable" in answer.headers["cache-control"]


def test_swagger_ui_is_the_pinned_files_of_its_version_and_the_docs_page_loads_them(
    client: TestClient,
):
    files = docs_assets()
    digests = {name: hashlib.sha256(path.read_bytes()).hexdigest() for name, path in files.items()}
    assert digests == SWAGGER_UI_SHA256
    for part, script in enumerate(SWAGGER_UI_SCRIPTS, start=1):
        banner = script.read_text("utf-8")[:100]
        assert f"Swagger UI {SWAGGER_UI_VERSION} " in banner and f"part {part} of 2" in banner
    page = client.get("/docs").text
    for name in files:
        assert f"/static/vendor/{name}" in page
    # swagger-client first: Swagger UI, in the second, reads modules the first registers
    first, second = (page.index(f"/static/vendor/{path.name}") for path in SWAGGER_UI_SCRIPTS)
    assert first < second < page.index("js/pages/api-docs.js")


def test_every_vendored_script_is_served_after_the_compile_hint(client: TestClient):
    scripts = {name: path for name, path in docs_assets().items() if path.suffix == ".js"}
    assert scripts  # Swagger UI's bundle
    for name, path in scripts.items():
        answer = client.get(f"/static/vendor/{name}")
        assert answer.content == COMPILE_HINT.encode() + path.read_bytes()
    css = next(name for name, path in docs_assets().items() if path.suffix == ".css")
    assert not client.get(f"/static/vendor/{css}").content.startswith(b"//")  # CSS as shipped


def test_pages_and_vendored_files_answer_head_as_get_without_the_body(client: TestClient):
    for path in ("/", "/zoom", "/lab", "/docs", f"/static/vendor/{PLOTLY_JS.name}"):
        got, head = client.get(path), client.head(path)
        assert head.status_code == got.status_code == 200, path
        assert head.headers["content-type"] == got.headers["content-type"], path
        assert head.content == b"", path
