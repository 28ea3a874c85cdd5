"""How a maps answer is sent: its pieces within what its reservation counts (held_while_sending),
handed to the server by SendGuard in bounded slices, none copied needlessly, and a reader that
takes nothing dropped after the send timeout."""

import asyncio

import pytest
import torch

from app.limits import SendGuard, _pieces
from atlas_engine.serialize import (
    BINARY_PIECE_BYTES,
    BYTES_PER_WEIGHT,
    KERNEL_SEND_BUFFER_BYTES,
    PIECE_BYTES,
    PIECES_HELD,
    SEND_CHUNK_BYTES,
    MapsAnswer,
    answer_bytes_bound,
    held_while_sending,
    quantize,
    sending_overhead,
)


@pytest.mark.parametrize(
    "fmt,shape,label",
    [
        ("f32", (6, 12, 128, 128), "word"),  # 4.7 MB: pieces of whole layers
        ("u8", (6, 12, 16, 16), "word"),  # sent whole
        ("json", (2, 4, 200, 200), "word"),
        ("u8", (1, 1, 3500, 3500), "a long token label " * 16),  # the head alone > a piece
        ("f32", (1, 2, 3000, 3000), "x"),  # rows of 12 kB
    ],
)
def test_the_pieces_a_maps_answer_holds_at_once_fit_what_it_reserves(fmt, shape, label):
    layers, heads, seq, _ = shape
    torch.manual_seed(0)
    maps = torch.softmax(torch.randn(heads, seq, seq), dim=-1)
    meta = {"tokens": [label] * seq, "token_ids": list(range(seq)), "layers": list(range(layers))}
    answer = MapsAnswer(meta, fmt, shape, lambda i: maps)
    sizes = [len(piece) for piece in answer.chunks()]
    if len(label) > 100:
        assert sizes[0] > 2**20  # the case it stands for
    weights = layers * heads * seq * seq
    assert sum(sizes) <= answer_bytes_bound(fmt, weights, seq)
    most = max(sum(sizes[i : i + PIECES_HELD]) for i in range(len(sizes)))
    assert most + sending_overhead(sum(sizes)) <= held_while_sending(fmt, weights, seq)


@pytest.mark.parametrize("fmt", ["u8", "f16", "f32", "npy", "safetensors"])
@pytest.mark.parametrize("shape", [(6, 12, 16, 16), (3, 12, 128, 128), (2, 3, 700, 700)])
def test_pieces_coded_in_place_are_the_head_and_each_layer_coded_whole(fmt, shape):
    layers, heads, seq, _ = shape
    torch.manual_seed(1)
    maps = [torch.softmax(torch.randn(heads, seq, seq), dim=-1) for _ in range(layers)]
    meta = {"tokens": ["w"] * seq, "layers": list(range(layers))}
    answer = MapsAnswer(meta, fmt, shape, lambda i: maps[i])
    pieces = list(answer.chunks())
    wire = "f32" if fmt in ("npy", "safetensors") else fmt
    expected = answer.head + b"".join(quantize(layer, wire) for layer in maps)
    assert b"".join(pieces) == expected
    assert len(expected) == answer.content_length
    # Each piece is bytes of its own (coded in one buffer reused for every piece, then copied
    # out of it), gathered as JSON's are: a piece ends before the block of rows that would take
    # it past BINARY_PIECE_BYTES, and every block of rows is at most BINARY_PIECE_BYTES.
    assert all(type(piece) is bytes for piece in pieces)
    row = seq * BYTES_PER_WEIGHT[wire]
    block = max(1, BINARY_PIECE_BYTES // row) * row
    assert all(len(piece) <= max(BINARY_PIECE_BYTES, len(answer.head)) for piece in pieces)
    assert all(len(a) + min(block, heads * seq * row) > BINARY_PIECE_BYTES for a in pieces[:-1])


def test_a_binary_answers_pieces_reach_the_server_as_they_are():
    """SendGuard hands a piece of at most SEND_CHUNK_BYTES to the server as it is: a binary
    answer's pieces are that size, so none is copied again on its way (its head, where longer,
    goes in slices); a trip to a compute lane makes about PIECE_BYTES of them."""
    seq = 300
    maps = torch.softmax(torch.randn(12, seq, seq), dim=-1)
    meta = {"tokens": ["w"] * seq, "layers": list(range(6))}
    answer = MapsAnswer(meta, "u8", (6, 12, seq, seq), lambda i: maps)
    assert answer.pieces_per_trip * BINARY_PIECE_BYTES == PIECE_BYTES
    assert MapsAnswer(meta, "json", (6, 12, seq, seq), lambda i: maps).pieces_per_trip == 1
    pieces = list(answer.chunks())
    assert len(pieces) > answer.pieces_per_trip  # the case it stands for: several trips
    for piece in pieces:
        (handed, last), *rest = _pieces(piece)
        assert handed is piece and last and rest == []


def test_an_answers_piece_that_is_a_buffer_reaches_the_server_as_bytes():
    body = memoryview(bytearray(b"abc" * 1000))
    (piece, last), *rest = _pieces(body)
    assert type(piece) is bytes and piece == bytes(body) and last and rest == []
    longer = memoryview(bytearray(SEND_CHUNK_BYTES + 5))
    assert all(type(piece) is bytes for piece, _ in _pieces(longer))


def test_sending_counts_the_slices_and_the_kernels_send_buffer_never_more_than_the_answer():
    assert sending_overhead(0) == 0
    assert sending_overhead(1000) == 3000
    big = 10**9
    assert sending_overhead(big) == 2 * SEND_CHUNK_BYTES + KERNEL_SEND_BUFFER_BYTES


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
