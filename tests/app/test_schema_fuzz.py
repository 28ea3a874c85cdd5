"""schemathesis against a live server, in every phase (examples, coverage, fuzzing, stateful),
positive and negative data, every check: no 5xx, every answer fits its documented schema and
status, invalid data is refused, valid data accepted (except a 422 'input_rule', a rule JSON
Schema cannot state: see tests/support/schemathesis_checks.py). Bounded in cases and time."""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from atlas_engine.models.registry import MINILM_ID, SMOLLM2_ID
from attention_atlas.cli import main as atlas
from tests.support.live import REPO, start_server

pytestmark = pytest.mark.slow

PHASES = "examples,coverage,fuzzing,stateful"
ROUTES = (
    "POST /api/attention",
    "POST /api/attention/detail",
    "POST /api/core/attention",
    "GET /api/models",
    "GET /api/models/{model_id}/status",
    "POST /api/models/{model_id}/load",
    "POST /api/lab/masks",
    "POST /api/lab/scaling",
    "GET /api/health",
)


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    # Texts up to 1,024 tokens: past the whole-map limit (512) and into the block-by-block
    # statistics, while a generated case costs seconds, not minutes (at 2,048 tokens one run
    # took 193 s and the next 371 s; SmolLM2's 8,192 tokens take minutes a request here, and
    # bench/long_context.py measures them; the fused kernel has its own tests).
    # A corpus run of its own (run 1, MiniLM on a few texts), so the corpus routes answer with
    # data, not 404: schemathesis.toml gives the fuzzer its id.
    folder = tmp_path_factory.mktemp("schema")
    (folder / "prose.txt").write_text(
        "\n\n".join(
            f"Paragraph {i} of a few, so that every head has some text to read." for i in range(8)
        )
    )
    store = folder / "corpus.sqlite"
    atlas(["corpus", "run", "--model", MINILM_ID, "--corpus", str(folder / "prose.txt"),
           "--texts", "4", "--tokens", "32", "--store", str(store)])  # fmt: skip
    live = start_server(
        folder / "server.log",
        {
            "ATLAS_MAX_TOKENS": "1024",
            "ATLAS_CORPUS_STORE": str(store),
            # the coverage phase sends the training route's boundary values as they are (the
            # hooks shrink only the fuzzed ones): runs estimated over 2 s are refused (422)
            "ATLAS_MAX_TRAIN_SECONDS": "2",
            "ATLAS_TRAINED_DIR": str(folder / "trained"),
        },
    )
    try:
        load_every_model(live.base)
        yield live
    finally:
        live.stop()


def load_every_model(base: str, timeout: float = 480) -> None:
    """Every available model loaded before the fuzz starts, as a served deployment preloads
    them: `--checks all` allows an answer 10 s, and a model's first use on a fresh clone
    converts its weights (SmolLM2's and Gemma's GGUF) for longer than that."""
    import json
    import time
    import urllib.request

    def call(path: str, method: str = "GET") -> dict:
        request = urllib.request.Request(f"{base}{path}", method=method)
        with urllib.request.urlopen(request, timeout=60) as response:
            return json.loads(response.read())

    deadline = time.monotonic() + timeout
    for model in call("/api/models")["models"]:
        if not model["available"]:
            continue
        state = call(f"/api/models/{model['id']}/load", "POST")["state"]
        while state == "loading":  # one at a time: a server keeps only so many loaded
            assert time.monotonic() < deadline, f"{model['id']} still loading after {timeout} s"
            time.sleep(0.5)
            state = call(f"/api/models/{model['id']}/status")["state"]
        assert state == "ready", (model["id"], state)
    # The composition examples' models: a loaded model's first composition scores every pair
    # of its heads once (SmolLM2: about 5 s idle, past 10 s under the suite's load), as a
    # served deployment's first such request would; the fuzz times the route's answers.
    for model in (MINILM_ID, SMOLLM2_ID):
        request = urllib.request.Request(
            f"{base}/api/attention/composition", method="POST",
            data=json.dumps({"model": model, "top": 1}).encode(),
            headers={"Content-Type": "application/json"},
        )  # fmt: skip
        with urllib.request.urlopen(request, timeout=120) as response:
            assert response.status == 200, model


def test_every_route_is_in_the_schema(server):
    import json
    import urllib.request

    with urllib.request.urlopen(f"{server.base}/openapi.json") as response:
        paths = json.loads(response.read())["paths"]
    labels = {f"{method.upper()} {path}" for path, item in paths.items() for method in item}
    assert set(ROUTES) <= labels
    from fastapi.routing import APIRoute

    from app.main import create_app

    def api_routes(routes):
        """Every APIRoute, also inside included routers (FastAPI keeps each router whole)."""
        for route in routes:
            inner = getattr(route, "original_router", None)
            if inner is not None:
                yield from api_routes(inner.routes)
            elif isinstance(route, APIRoute):
                yield route

    served = {
        f"{method} {re.sub(r':[a-z]+}', '}', route.path)}"  # {model_id:path} is {model_id} there
        for route in api_routes(create_app().routes)
        if route.path.startswith("/api") and route.include_in_schema
        for method in route.methods
    }
    assert len(served) >= len(ROUTES)  # the walk found the routes, so the check below can fail
    assert served <= labels, served - labels  # every API route the app serves is documented


def test_schemathesis_finds_nothing_in_any_phase(server, tmp_path: Path):
    command = [
        str(Path(sys.executable).parent / "st"),
        "--config-file", str(REPO / "tests" / "support" / "schemathesis.toml"),
        "run", f"{server.base}/openapi.json",
        "--phases", PHASES,  # modes and examples: in schemathesis.toml (CLI options win)
        "--checks", "all", "--exclude-checks", "positive_data_acceptance", "--workers", "1",
        "--request-timeout", "60",
        "--suppress-health-check", "all", "--no-color",
    ]  # fmt: skip
    env = {
        **os.environ,
        "SCHEMATHESIS_HOOKS": "tests.support.schemathesis_checks",
        "PYTHONPATH": str(REPO),
    }
    run = subprocess.run(
        command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=540
    )
    output = run.stdout + run.stderr
    assert run.returncode == 0 and "No issues found" in output, output[-6000:]
    for phase in ("Examples", "Coverage", "Fuzzing", "Stateful"):
        assert f"✅  {phase}" in output, output[-3000:]
