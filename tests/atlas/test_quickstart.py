"""The README's Python quick start (examples/quickstart.py, the same text) runs offline as
printed, in a fresh interpreter, against a live server: only the server's address differs."""

import subprocess
import sys

import pytest

from tests.support.live import REPO

pytestmark = pytest.mark.slow
QUICKSTART = REPO / "examples" / "quickstart.py"
PRINTED_ADDRESS = "http://127.0.0.1:8000"


@pytest.mark.parametrize("page", ["README.md", "docs/python.md"])
def test_the_docs_print_the_quick_start_the_suite_runs(page):
    text = (REPO / page).read_text()
    printed = text.split("```python\n", 1)[1].split("```", 1)[0]
    assert printed == QUICKSTART.read_text()


def test_the_quick_start_names_the_servers_address_once():
    """Issue 49.8: a server on another port (make run PORT=...) is one line to change."""
    source = QUICKSTART.read_text()
    assert source.count(PRINTED_ADDRESS) == 1
    assert f'\nserver = "{PRINTED_ADDRESS}"  #' in source and "AtlasClient(server)" in source


def test_the_quick_start_runs_as_printed(atlas_server):
    source = QUICKSTART.read_text()
    assert len(source.splitlines()) <= 25 and source.count(PRINTED_ADDRESS) == 1
    run = subprocess.run(
        [sys.executable, "-c", source.replace(PRINTED_ADDRESS, atlas_server.base)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    lines = run.stdout.splitlines()
    assert lines[:3] == [
        "['[CLS]', 'the', 'cat', 'sat', 'on', 'the', 'mat', '.', '[SEP]']",
        "torch.Size([6, 12, 9, 9])",
        "True 3",
    ]
    assert lines[3].startswith("(6, 12, 6, 6) 0.0019")
    assert "'forward'" in lines[4] and lines[5].startswith("[(")
    assert lines[-3:] == ["␣Paris", ".", "'The capital of France is Paris.'"]  # greedy
