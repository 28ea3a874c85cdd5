"""A live uvicorn server and Debian's Chromium driven by Playwright, for end-to-end tests."""

from pathlib import Path

import pytest

from attention_atlas.cli import main as atlas
from tests.e2e.pages import MINILM, PROSE
from tests.support.live import start_server

CHROMIUM = "/usr/bin/chromium"
# Without the networking flags Chromium's background connections fail on a closed network.
CHROMIUM_ARGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
]  # fmt: skip


live_server_log: dict = {}


@pytest.fixture(scope="session")
def server_log(live_server):
    """A function returning what the live server has logged so far."""
    return lambda: live_server_log["path"].read_text(errors="replace")


@pytest.fixture(scope="session")
def live_server(tmp_path_factory):
    """Base URL of a real server (`python -m app`, as `make run` starts it) on a free port."""
    log_path = tmp_path_factory.mktemp("server") / "uvicorn.log"
    live_server_log["path"] = log_path
    try:
        server = start_server(log_path)
    except RuntimeError as err:
        pytest.fail(str(err))
    yield server.base
    server.stop()


@pytest.fixture(scope="session")
def browser():
    if not Path(CHROMIUM).exists():
        pytest.fail(
            f"{CHROMIUM} is missing: `make test` installs Debian's chromium (apt-get install chromium)"
        )
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield b
        b.close()


@pytest.fixture
def page(browser):
    context = browser.new_context(viewport={"width": 1280, "height": 800}, accept_downloads=True)
    pg = context.new_page()
    errors: list[str] = []
    pg.on("pageerror", lambda e: errors.append(str(e)))
    pg.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    pg.errors = errors
    yield pg
    context.close()


@pytest.fixture(scope="module")
def corpus_server(tmp_path_factory):
    """A server reading a small MiniLM corpus run made with the CLI (the head and heads pages)."""
    root = tmp_path_factory.mktemp("corpus")
    (root / "prose.txt").write_text(PROSE)
    store = root / "corpus.sqlite"
    atlas(["corpus", "run", "--model", MINILM, "--corpus", str(root / "prose.txt"),
           "--texts", "6", "--tokens", "40", "--store", str(store)])  # fmt: skip
    server = start_server(root / "server.log", {"ATLAS_CORPUS_STORE": str(store)})
    yield server.base
    server.stop()
