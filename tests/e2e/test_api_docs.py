"""Issue 9.1: the API docs page works offline under the app's own CSP."""

import json
import urllib.request

import pytest
from axe_playwright_python.sync_playwright import Axe

from atlas_engine.schemas.common import NOT_BLANK
from tests.e2e.helpers import LONG_TASKS, TASK_GUARD_MS, wait_js
from tests.support.whitespace import BLANKS

pytestmark = [pytest.mark.e2e, pytest.mark.slow]


def test_docs_list_every_operation_and_try_it_out_answers_without_leaving_the_origin(
    page, live_server
):
    off_origin = []
    page.on(
        "request",
        lambda r: (
            None if r.url.startswith((live_server, "data:", "blob:")) else off_origin.append(r.url)
        ),
    )
    with urllib.request.urlopen(f"{live_server}/openapi.json") as response:
        paths = json.loads(response.read())["paths"]
    operations = sum(len(item) for item in paths.values())
    page.goto(f"{live_server}/docs")
    wait_js(page, f"document.querySelectorAll('.opblock').length === {operations}")
    block = (
        page.locator(".opblock-post", has_text="/api/attention")
        .filter(has_not_text="/detail")
        .first
    )
    block.locator(".opblock-summary").click()
    block.get_by_role("button", name="Try it out").click()
    block.get_by_role("button", name="Execute").click()
    status = block.locator(".live-responses-table tbody .response-col_status").first
    status.wait_for(timeout=60_000)
    assert status.text_content().strip() == "200"
    assert "attentions" in block.locator(".live-responses-table").text_content()
    assert off_origin == []
    assert not [e for e in page.errors if "Content Security Policy" in e], page.errors


def test_redoc_points_to_the_local_docs(live_server):
    with urllib.request.urlopen(f"{live_server}/redoc") as response:
        assert response.url.endswith("/docs") and b"swagger-ui" in response.read()


SAME_RESOLUTION = """async () => {
  const doc = await (await fetch('/openapi.json')).json();
  const { partWithReferences } = await import('/static/js/pages/api-docs.js');
  const configs = { modelPropertyMacro: null, parameterMacro: null };
  const { resolveSubtree } = window.SwaggerUIBundle.plugins.SwaggerClient({
    configs: {}, getConfigs: () => configs,
  }).fn;
  const options = { baseDoc: new URL('/openapi.json', location.href).href };
  const resolve = (spec, path) => resolveSubtree(spec, path, options);
  // The whole document resolved once for all operations and once for all schemas: an
  // operation or a schema resolves inside its parent as it does alone (every one was
  // compared), and alone each took 300 ms.
  const paths = await resolve(structuredClone(doc), ['paths']);
  const schemas = await resolve(structuredClone(doc), ['components', 'schemas']);
  const names = Object.keys(doc.components.schemas);  // and a model opened in Schemas:
  const expected = [[['components', 'schemas'], schemas.spec], ...[0, names.length >> 1,
    names.length - 1].map((i) => [['components', 'schemas', names[i]], schemas.spec[names[i]]])];
  for (const [path, item] of Object.entries(doc.paths)) {
    for (const method of Object.keys(item)) {
      expected.push([['paths', path, method], paths.spec[path][method]]);
    }
  }
  const differ = [...paths.errors, ...schemas.errors].map((e) => `whole: ${e.message}`);
  for (const [path, whole] of expected) {
    const part = await resolve(partWithReferences(structuredClone(doc), path), path);
    if (part.errors.length || JSON.stringify(part.spec) !== JSON.stringify(whole)) {
      differ.push(path.join(' '));
    }
  }
  return { parts: expected.length, differ };
}"""


def test_each_operation_resolved_from_its_part_is_what_swagger_resolves_from_the_whole(
    page, live_server
):
    """The docs page resolves an opened operation from the part of the document it needs (its
    path and the components it refers to) instead of the whole document (300 ms a time): the
    same resolution, for every operation and for the schemas, as Swagger UI's own."""
    page.goto(f"{live_server}/docs")
    wait_js(page, "document.querySelectorAll('.opblock').length > 0")
    checked = page.evaluate(SAME_RESOLUTION)
    assert checked["parts"] > 35 and checked["differ"] == [], checked


def test_an_opened_operation_shows_its_request_and_answer_schemas(page, live_server):
    page.goto(f"{live_server}/docs")
    wait_js(page, "document.querySelectorAll('.opblock').length > 0")
    block = page.locator(".opblock-post", has_text="/api/attention/tiles").first
    block.locator(".opblock-summary").click()
    body = block.locator(".opblock-body")
    body.get_by_role("heading", name="Request body").wait_for(timeout=10_000)
    for status in ("200", "413", "422"):  # every status is documented, and shown
        assert block.locator(f"tr.response[data-code='{status}']").count() == 1, status
    assert '"reduce"' in body.text_content()  # the example drawn from TilesRequest, its $ref
    assert not page.errors, page.errors


def test_an_opened_operation_fits_two_screens_and_still_shows_every_status(page, live_server):
    """POST /api/attention, the longest operation, was 4,139 px open at 1280 x 800 (five
    screens): each error status drawn with a media-type menu, tabs and its example open, and a
    description with a table. An error is now one row, its example folded, and a long
    description folds after its first paragraph (app/.../api-docs.js): 1,388 px."""
    with urllib.request.urlopen(f"{live_server}/openapi.json") as response:
        paths = json.loads(response.read())["paths"]
    documented = sorted(paths["/api/attention"]["post"]["responses"])
    page.goto(f"{live_server}/docs")
    wait_js(page, "document.querySelectorAll('.opblock').length > 0")
    block = (
        page.locator(".opblock-post", has_text="/api/attention")
        .filter(has_not_text="/detail")
        .first
    )
    block.locator(".opblock-summary").click()
    block.get_by_role("heading", name="Request body").wait_for(timeout=10_000)
    shown = block.locator("tr.response").evaluate_all("rows => rows.map((r) => r.dataset.code)")
    assert sorted(shown) == documented and len(documented) >= 9, shown
    assert block.bounding_box()["height"] <= 2 * 800
    error = block.locator("tr.response[data-code='422']")
    error.get_by_text("Example").click()  # an error's example body, one click away
    assert '"invalid_field"' in error.locator(".highlight-code").text_content()
    block.locator(".description-more").get_by_text("More").click()
    assert "Binary formats" in block.locator(".opblock-description").text_content()
    violations = Axe().run(page).response["violations"]
    assert [(v["id"], v["impact"]) for v in violations] == []
    assert not page.errors, page.errors


def test_an_opened_operation_with_parameters_has_no_axe_finding(page, live_server):
    """Swagger UI's grey "(path)" beside a parameter was 3.9:1 (axe: serious); its own main
    landmark and h1 title over h3 tags are fitted to the page's (app/.../api-docs.js)."""
    page.goto(f"{live_server}/docs")
    wait_js(page, "document.querySelectorAll('.opblock').length > 0")
    block = page.locator(".opblock-get", has_text="/api/models/{model_id}/status").first
    block.locator(".opblock-summary").click()
    block.locator(".parameter__in").first.wait_for(timeout=10_000)
    violations = Axe().run(page).response["violations"]
    assert [(v["id"], v["impact"]) for v in violations] == []
    assert not page.errors, page.errors


def test_docs_load_and_open_an_operation_without_a_long_main_thread_task(browser, live_server):
    """Swagger UI's script runs in two tasks (swagger-client, then the rest) and an opened
    operation is drawn in a task after the one that resolves it: in one piece each was a task
    of 123-208 ms on the 2-core test machine, now 90-166 ms."""

    def longest_tasks() -> tuple[int, int]:
        """The longest task while /docs loads in a fresh tab, and while an operation opens."""
        context = browser.new_context(viewport={"width": 1280, "height": 800})
        try:
            page = context.new_page()
            page.add_init_script(LONG_TASKS)
            page.goto(f"{live_server}/docs")
            wait_js(page, "document.querySelectorAll('.opblock').length > 0")
            page.wait_for_load_state("networkidle")
            page.wait_for_timeout(300)
            loading = max(page.evaluate("window.__long"), default=0)
            page.evaluate("window.__long = []")
            block = page.locator(".opblock-post", has_text="/api/attention/tiles").first
            block.locator(".opblock-summary").click()
            block.get_by_role("heading", name="Request body").wait_for(timeout=10_000)
            page.wait_for_timeout(300)
            return loading, max(page.evaluate("window.__long"), default=0)
        finally:
            context.close()

    # A task over the limit is over it on every load; a moment's contention on the 2 cores (the
    # suite's server, a GC) is not: up to three fresh loads.
    tries = []
    for _ in range(3):
        tries.append(longest_tasks())
        if max(tries[-1]) <= TASK_GUARD_MS:
            break
    assert max(tries[-1]) <= TASK_GUARD_MS, tries


BLANK_TO_THE_BROWSER = """(pattern) => {
  const blanks = { u: [], plain: [] };
  for (const [name, flags] of [['u', 'u'], ['plain', '']]) {
    const notBlank = new RegExp(pattern, flags);
    for (let c = 0; c <= 0x10ffff; c++) {
      if ((c < 0xd800 || c > 0xdfff) && !notBlank.test(String.fromCodePoint(c))) {
        blanks[name].push(c);
      }
    }
  }
  return blanks;
}"""


def test_the_browsers_regex_engine_reads_the_not_blank_pattern_as_python_does(page):
    blanks = page.evaluate(BLANK_TO_THE_BROWSER, NOT_BLANK)
    expected = [ord(c) for c in BLANKS]
    assert blanks["u"] == expected  # as JSON Schema validators compile it
    assert blanks["plain"] == expected
