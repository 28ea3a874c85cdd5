"""Issue 38: the connection caps' settings (the caps themselves are proved on a live server in
tests/e2e/test_transport_limits.py)."""

import pytest
from pydantic import ValidationError

from app.transport import ConnectionCaps, _is_exempt, head_deadline_protocol
from atlas_engine.config import Settings, default_max_connections, open_file_limit


def test_the_default_cap_leaves_half_the_file_descriptors_and_more_refuses_to_start():
    limit = open_file_limit()
    assert limit is not None  # Linux, in CI
    assert Settings().max_connections == default_max_connections() == min(2000, limit // 2)
    with pytest.raises(ValidationError, match=r"open-file limit \(ulimit -n\) is"):
        Settings(max_connections=limit)


def test_trusted_proxies_are_exempt_from_the_per_client_cap_only():
    settings = Settings(max_connections=100, trusted_proxies=["10.0.0.0/8"])
    caps = ConnectionCaps.from_settings(settings)
    assert (caps.total, caps.per_client) == (100, 256)
    assert _is_exempt("10.1.2.3", caps.exempt)
    assert not _is_exempt("192.168.0.1", caps.exempt)
    assert not _is_exempt("not an address", caps.exempt)


def test_each_server_counts_its_own_connections():
    first, second = head_deadline_protocol(20, Settings()), head_deadline_protocol(20, Settings())
    assert first.open_per_client is not second.open_per_client
    assert head_deadline_protocol(20).caps is None  # without settings, no caps
    assert b"\r\nretry-after: 5\r\n" in first.over_per_client
    assert first.over_total.startswith(b"HTTP/1.1 503 Service Unavailable\r\n")
