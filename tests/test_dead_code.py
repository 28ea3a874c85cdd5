"""No dead code at high confidence: vulture, with the paths and threshold of pyproject's
[tool.vulture] (unused imports and variables, unreachable code), finds nothing."""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_vulture_finds_no_dead_code():
    found = subprocess.run(
        [sys.executable, "-m", "vulture"], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert found.returncode == 0, found.stdout + found.stderr


def test_vulture_would_report_an_unused_import(tmp_path):
    (tmp_path / "m.py").write_text("import os\n\n\ndef f(unused):\n    return 1\n")
    found = subprocess.run(
        [sys.executable, "-m", "vulture", "--min-confidence", "90", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert "unused import 'os'" in found.stdout
    assert "unused variable 'unused'" in found.stdout
