"""Imports run one way (docs/architecture.md): attention_core imports nothing of ours;
atlas_engine, below the server and the library, imports attention_core alone; the server
(app) never imports the library; the library (attention_atlas) imports the server's package
only where it reads the list of the front end's files to pack them for the notebook widget
(`atlas serve` starts the server as a program, importing none of it).
Inside atlas_engine, the inner floors: models < inference < services, the corpus job below the
services, and the request schemas importing no inference.
Read from the source, every import statement, top level or inside a function."""

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OURS = {"app", "atlas_engine", "attention_core", "attention_atlas"}
ALLOWED = {
    "attention_core": set(),
    "atlas_engine": {"attention_core"},
    "app": {"atlas_engine", "attention_core"},
    "attention_atlas": {"atlas_engine", "attention_core"},
}
SERVER_IN_THE_LIBRARY = {"attention_atlas/bundle.py"}
ENGINE_FLOORS = {
    # atlas_engine's subpackage: those of its subpackages it must not import.
    "models": {"inference", "services", "corpus", "schemas"},
    "inference": {"services", "corpus", "schemas"},
    "corpus": {"services"},
    "schemas": {"inference", "services", "corpus"},
}


def imports_of(path: Path) -> set[str]:
    """The top-level packages of ours that a module imports."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            found.add(node.module.split(".")[0])
    return found & OURS


def engine_imports_of(path: Path) -> set[str]:
    """The parts of atlas_engine a module imports (`inference` for atlas_engine.inference.x)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names = [f"{node.module}.{alias.name}" for alias in node.names]
        else:
            continue
        found |= {name.split(".")[1] for name in names if name.startswith("atlas_engine.")}
    return found


def crossings() -> list[str]:
    wrong = []
    for package, allowed in ALLOWED.items():
        for path in sorted((ROOT / package).rglob("*.py")):
            name = str(path.relative_to(ROOT))
            extra = {"app"} if name in SERVER_IN_THE_LIBRARY else set()
            for other in sorted(imports_of(path) - {package} - allowed - extra):
                wrong.append(f"{name} imports {other}")
    return wrong


def test_imports_run_one_way():
    assert crossings() == []


def engine_crossings() -> list[str]:
    wrong = []
    for part, forbidden in ENGINE_FLOORS.items():
        for path in sorted((ROOT / "atlas_engine" / part).rglob("*.py")):
            name = str(path.relative_to(ROOT))
            for other in sorted(engine_imports_of(path) & forbidden):
                wrong.append(f"{name} imports atlas_engine.{other}")
    return wrong


def test_the_engine_keeps_its_inner_floors():
    assert engine_crossings() == []


def test_the_check_sees_imports_inside_functions(tmp_path):
    module = tmp_path / "m.py"
    module.write_text(
        "def f():\n    from app.main import create_app\n    import atlas_engine.formats\n"
    )
    assert imports_of(module) == {"app", "atlas_engine"}
    assert imports_of(ROOT / "attention_atlas" / "bundle.py") >= {"app"}


def test_the_engine_check_reads_every_form_of_import(tmp_path):
    module = tmp_path / "m.py"
    module.write_text(
        "from atlas_engine import compute\nimport atlas_engine.models.loader\n"
        "def f():\n    from atlas_engine.services.passes import Passes\n"
    )
    assert engine_imports_of(module) == {"compute", "models", "services"}
