"""The front end's ES modules pass Biome's linter and are formatted as it formats them
(biome.json; `make format` rewrites them). Biome is a dev tool: make install-test installs it
from tools/js-lint's lock."""

from __future__ import annotations

import subprocess

from tests.support.live import REPO

BIOME = REPO / "tools" / "js-lint" / "node_modules" / ".bin" / "biome"


def test_the_front_end_passes_biome():
    assert BIOME.exists(), "Biome is not installed: run `make install-test`"
    found = subprocess.run(
        [str(BIOME), "ci", "--error-on-warnings", "--colors=off"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert found.returncode == 0, found.stdout[-4000:] + found.stderr[-2000:]
    assert "Checked" in found.stdout + found.stderr  # it looked at the modules


def test_a_lint_finding_fails(tmp_path):
    """The check can fail: a module with an unused import is refused."""
    bad = REPO / "app" / "web" / "static" / "js" / "_lint_probe.js"
    bad.write_text('import { api } from "./api.js";\n\nexport const one = 1;\n')
    try:
        found = subprocess.run(
            [str(BIOME), "ci", "--error-on-warnings", "--colors=off", str(bad.relative_to(REPO))],
            cwd=REPO, capture_output=True, text=True, timeout=120,
        )  # fmt: skip
    finally:
        bad.unlink()
    assert found.returncode != 0 and "noUnusedImports" in found.stdout + found.stderr
