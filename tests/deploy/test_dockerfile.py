"""The Dockerfile copies every first-party package the server imports into the image.

Building the image takes minutes and runs only in CI's docker-test; this catches the commonest
way it breaks (a new package the app imports but the image lacks) in a second, from the source.
"""

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
FIRST_PARTY = {p.name for p in ROOT.iterdir() if (p / "__init__.py").is_file()} - {"tests"}


def imported_packages(package: str) -> set[str]:
    """First-party top-level packages that the modules of `package` import."""
    found = set()
    for path in (ROOT / package).rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            else:
                continue
            found |= {name.split(".")[0] for name in names} & FIRST_PARTY
    return found


def server_packages() -> set[str]:
    """`app` and, transitively, every first-party package reachable from it."""
    needed, todo = set(), ["app"]
    while todo:
        package = todo.pop()
        if package not in needed:
            needed.add(package)
            todo.extend(imported_packages(package))
    return needed


def copied_per_stage() -> list[set[str]]:
    """For each FROM stage, the folders it COPYs from the build context (not --from=)."""
    stages: list[set[str]] = []
    for line in (ROOT / "Dockerfile").read_text().splitlines():
        if line.startswith("FROM "):
            stages.append(set())
        match = re.match(r"COPY (?!--from)(\S+) ", line)
        if match and stages:
            stages[-1].add(match.group(1).rstrip("/"))
    return stages


def test_the_server_needs_more_than_app_so_the_check_means_something():
    assert {"app", "atlas_engine", "attention_core"} <= server_packages()


def test_the_image_copies_every_package_the_server_imports():
    needed = server_packages()
    stages = copied_per_stage()
    assert stages, "the Dockerfile has no FROM"
    image = stages[-1]  # the last stage is the image
    assert needed <= image, f"the image lacks {sorted(needed - image)}"
