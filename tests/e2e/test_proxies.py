"""Issue 8.9: forwarded addresses are believed only from the proxies the operator lists."""

import http.client
import json
import math
import random
import time

import pytest

from tests.support.live import start_server

pytestmark = [pytest.mark.slow, pytest.mark.alone]


def get_models(conn: http.client.HTTPConnection, forwarded_for: str) -> int:
    conn.request("GET", "/api/models", headers={"X-Forwarded-For": forwarded_for})
    response = conn.getresponse()
    response.read()
    return response.status


@pytest.fixture
def server_factory(tmp_path):
    started = []

    def start(**env):
        server = start_server(tmp_path / f"server{len(started)}.log", env)
        started.append(server)
        return server

    yield start
    for server in started:
        server.stop()


def test_forged_forwarded_for_neither_dodges_the_rate_limit_nor_reaches_the_log(server_factory):
    per_minute = 30
    server = server_factory(ATLAS_RATE_LIMIT_PER_MINUTE=str(per_minute))
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=30)
    rng = random.Random(0)
    started = time.monotonic()
    statuses = [
        get_models(conn, f"{rng.randrange(1, 255)}.{rng.randrange(256)}.0.{rng.randrange(256)}")
        for _ in range(80)
    ]
    statuses += [get_models(conn, "not-an-ip <script>") for _ in range(20)]
    elapsed = time.monotonic() - started
    conn.close()
    # One bucket for the real peer whatever the header says: the burst plus what refilled while
    # the requests ran (however slow the machine), never one bucket per forged address.
    allowed = per_minute + math.ceil(elapsed * per_minute / 60)
    assert statuses[:per_minute] == [200] * per_minute
    assert statuses.count(200) <= allowed and set(statuses) == {200, 429}, (allowed, elapsed)
    log = server.log()
    assert "not-an-ip" not in log and "<script>" not in log
    assert "127.0.0.1" in log


def test_a_trusted_proxy_names_each_client_and_each_gets_its_own_limit(server_factory):
    server = server_factory(
        ATLAS_RATE_LIMIT_PER_MINUTE="5", ATLAS_TRUSTED_PROXIES=json.dumps(["127.0.0.1"])
    )
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=30)
    first = [get_models(conn, "203.0.113.5") for _ in range(6)]
    assert first == [200] * 5 + [429]
    # A proxy appends the peer it saw: the right-most untrusted address is the client.
    assert get_models(conn, "forged-by-client, 203.0.113.6") == 200
    conn.close()
    assert "203.0.113.5" in server.log() and "forged-by-client" not in server.log()


def test_settings_refuse_to_trust_everyone():
    from pydantic import ValidationError

    from atlas_engine.config import Settings

    with pytest.raises(ValidationError, match="not an IP address or network"):
        Settings(trusted_proxies=["*"])
    assert Settings(trusted_proxies=["10.0.0.0/8", "::1"]).trusted_proxies == ["10.0.0.0/8", "::1"]
