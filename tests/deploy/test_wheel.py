"""`pip install` of the project (a wheel, not an editable checkout) carries everything the app
and the notebook widget read from disk: the pages' templates, ES modules and stylesheets, and
the lessons that ship."""

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DATA = (ROOT / "app" / "web", ROOT / "atlas_engine" / "lessons")

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> Path:
    """The project's wheel, built from a clean copy of the checkout's files (no egg-info or
    build folder left by an editable install) and unpacked into a folder, as pip installs it."""
    out = tmp_path_factory.mktemp("wheel")
    source = out / "source"
    listed = subprocess.run(
        ["git", "ls-files", "-co", "--exclude-standard", "-z"],
        cwd=ROOT, check=True, capture_output=True, text=True,
    ).stdout.split("\0")  # fmt: skip
    for name in filter(None, listed):
        if (ROOT / name).is_file():
            (source / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, source / name)
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check", "-q"]
    subprocess.run(
        [*pip, "wheel", "--no-deps", "--no-build-isolation", "-w", str(out), str(source)],
        check=True,
        capture_output=True,
    )
    (wheel,) = out.glob("*.whl")
    target = out / "site"
    with zipfile.ZipFile(wheel) as archive:
        archive.extractall(target)
    return target


def test_the_wheel_carries_every_web_file(installed):
    expected = {
        p.relative_to(ROOT)
        for folder in DATA
        for p in folder.rglob("*")
        if p.is_file() and "__pycache__" not in p.parts
    }
    assert {p for p in expected if p.suffix in (".js", ".html", ".css")}, "nothing to check"
    assert {p for p in expected if p.suffix == ".json"}, "no lesson to check"
    missing = sorted(str(p) for p in expected if not (installed / p).is_file())
    assert missing == []


def test_the_installed_app_and_widget_find_their_files(installed, tmp_path):
    code = (
        "import app.web.assets as a, attention_atlas.bundle as b; "
        f"assert str(a.STATIC_DIR).startswith({str(installed)!r}), a.STATIC_DIR; "
        "assert (a.TEMPLATES_DIR / 'explorer.html').is_file(); "
        "print(len(b.widget_esm()) > 10000, len(b.widget_css()) > 1000)"
    )
    run = subprocess.run(
        [sys.executable, "-c", code],
        cwd=tmp_path,  # not the checkout: only the installed copy is importable as app
        env={"PYTHONPATH": str(installed), "PATH": "/usr/bin:/bin", "HF_HUB_OFFLINE": "1"},
        capture_output=True,
        text=True,
    )
    assert run.returncode == 0, run.stderr[-2000:]
    assert run.stdout.split() == ["True", "True"]
