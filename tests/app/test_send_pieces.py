"""How SendGuard hands an answer's bytes to the server: bounded pieces, none copied needlessly,
and a reader that takes nothing dropped after the send timeout."""

import asyncio

import pytest

from app.limits import SEND_CHUNK_BYTES, SendGuard, _pieces


def test_a_body_of_one_piece_goes_as_it_is():
    body = bytes(range(256)) * (SEND_CHUNK_BYTES // 256)
    (piece, last), *rest = _pieces(body)
    assert piece is body and last and rest == []
    assert list(_pieces(b"")) == [(b"", True)]


@pytest.mark.parametrize("size", [SEND_CHUNK_BYTES + 1, 3 * SEND_CHUNK_BYTES, 5_000_001])
def test_a_longer_body_goes_in_bounded_pieces_in_order(size):
    body = bytes(i % 251 for i in range(size))
    pieces = list(_pieces(body))
    assert b"".join(piece for piece, _ in pieces) == body
    assert all(len(piece) <= SEND_CHUNK_BYTES for piece, _ in pieces)
    assert [last for _, last in pieces] == [False] * (len(pieces) - 1) + [True]


def _answer(body: bytes):
    async def app(scope, receive, send):
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": body, "more_body": False})

    return app


def test_the_server_sees_every_piece_and_the_end_of_the_body_once():
    body = b"x" * (2 * SEND_CHUNK_BYTES + 7)
    sent = []

    async def send(message):
        sent.append(message)

    asyncio.run(SendGuard(_answer(body), timeout=5)({"type": "http"}, None, send))
    chunks = [m for m in sent if m["type"] == "http.response.body"]
    assert b"".join(m["body"] for m in chunks) == body
    assert [m["more_body"] for m in chunks] == [True, True, False]


def test_a_reader_that_takes_nothing_is_dropped_after_the_timeout(caplog):
    async def never_drains(message):
        if message["type"] == "http.response.body":
            await asyncio.sleep(3600)

    async def run():
        guard = SendGuard(_answer(b"y" * 10), timeout=0.05)
        await asyncio.wait_for(guard({"type": "http", "path": "/api/x"}, None, never_drains), 5)

    asyncio.run(run())
    assert "it read nothing for 0.05 s" in caplog.text
