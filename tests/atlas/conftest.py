"""A live server (`python -m app`, as `make run` starts it) shared by the library's tests."""

import pytest

from tests.support.live import start_server


@pytest.fixture(scope="session")
def atlas_server(tmp_path_factory):
    server = start_server(tmp_path_factory.mktemp("atlas") / "server.log")
    yield server
    server.stop()
