"""A live server (`python -m app`, as `make run` starts it) shared by the library's tests, and
the suite's converted SmolLM2 copy shared by the library's own runs."""

import pytest

from tests.conftest import CACHE_DIR
from tests.support.live import start_server


@pytest.fixture(scope="package", autouse=True)
def suite_cache_folder():
    """run_model (and the quick start it runs) reads the suite's converted SmolLM2 copy, the
    live server's, instead of converting one more into the user's cache folder."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("ATLAS_CACHE_DIR", str(CACHE_DIR))
        yield


@pytest.fixture(scope="session")
def atlas_server(tmp_path_factory):
    server = start_server(tmp_path_factory.mktemp("atlas") / "server.log")
    yield server
    server.stop()
