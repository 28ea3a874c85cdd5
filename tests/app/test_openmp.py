"""`python -m app` shortens libgomp's spin (app.openmp) before torch is loaded, when libgomp reads
it, and leaves an operator's own choice alone."""

import os
import subprocess
import sys
import textwrap

from app.openmp import OPERATOR_SETTINGS, SPIN_COUNT, spin_briefly
from tests.support.live import REPO

SPIN_AS_TORCH_LOADS = textwrap.dedent(
    """
    import importlib.abc, os, sys

    seen = []

    class TorchWatch(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path, target=None):
            if name == "torch" and not seen:
                seen.append(os.environ.get("GOMP_SPINCOUNT", "unset"))
            return None

    sys.meta_path.insert(0, TorchWatch())
    import uvicorn
    uvicorn.run = lambda app, **options: __import__(app.split(":")[0])  # load it, serve nothing
    import app.__main__ as entry
    assert "torch" not in sys.modules, "importing the entry point loaded torch"
    entry.main([])
    assert "torch" in sys.modules and seen, "the app never loaded torch"
    print(seen[0])
    """
)


def spin_when_torch_loads(**environ: str) -> str:
    """GOMP_SPINCOUNT as torch was first imported by `python -m app`'s main (serving nothing)."""
    env = {k: v for k, v in os.environ.items() if k not in OPERATOR_SETTINGS}
    done = subprocess.run(
        [sys.executable, "-c", SPIN_AS_TORCH_LOADS],
        cwd=REPO,
        env={**env, **environ},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_the_server_sets_the_spin_before_torch_loads():
    assert spin_when_torch_loads() == str(SPIN_COUNT)


def test_an_operators_spin_is_kept():
    assert spin_when_torch_loads(GOMP_SPINCOUNT="5") == "5"
    assert spin_when_torch_loads(OMP_WAIT_POLICY="PASSIVE") == "unset"


def test_spin_briefly_only_fills_a_gap():
    empty: dict[str, str] = {}
    spin_briefly(empty)
    assert empty == {"GOMP_SPINCOUNT": str(SPIN_COUNT)}
    for chosen in ({"GOMP_SPINCOUNT": "0"}, {"OMP_WAIT_POLICY": "ACTIVE"}):
        environ = dict(chosen)
        spin_briefly(environ)
        assert environ == chosen
