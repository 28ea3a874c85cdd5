"""The one place where tensors become JSON-ready lists (and, for the model API, bytes)."""

from __future__ import annotations

import json
import math
import struct
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import TypeVar

import numpy
import orjson
import torch
from pydantic import BaseModel
from torch import Tensor

from atlas_engine.formats import ATLS_MAGIC, ATLS_VERSION, decode_atls
from attention_core.scratch import Scratch

SEND_CHUNK_BYTES = 256 * 1024
"""Largest piece of an answer handed to the server at once. The server buffers at most one
piece (plus its socket buffers) for a reader that has stopped reading."""


def _kernel_send_buffer_bytes() -> int:
    """The most one connection's kernel send buffer holds: Linux grows it up to the largest of
    net.ipv4.tcp_wmem (4 MiB by default), read once; 4 MiB where that cannot be read."""
    try:
        return int(Path("/proc/sys/net/ipv4/tcp_wmem").read_text().split()[2])
    except (OSError, ValueError, IndexError):
        return 4 * 2**20


KERNEL_SEND_BUFFER_BYTES = _kernel_send_buffer_bytes()
"""What the kernel may take of an answer into its connection's send buffer while a slow reader
takes it: memory outside the process, but charged to the server's cgroup in a container."""

T = TypeVar("T")


NARROW_FLOATS = (torch.float32, torch.float16, torch.bfloat16)


def to_lists(t: Tensor, digits: int | None = None) -> list:
    """A float tensor as nested lists of Python floats, optionally rounded.

    A float64 tensor's values are kept as they are. A float32 (or narrower) tensor's are each
    the shortest decimal that reads back as exactly the same float32, as the maps' JSON is
    written (float32_json_rows): 0.1 where float64's digits of the same float32 would be
    0.10000000149011612, so a JSON answer says what the model computed, to its precision,
    in about half the characters. Non-finite values are not valid JSON; use
    to_lists_with_nulls where they can occur.
    """
    values = t.detach().cpu()  # to the host first: mps has no float64
    if digits is None and values.dtype in NARROW_FLOATS and torch.isfinite(values).all():
        return _shortest_float32(values)
    values = values.to(torch.float64)
    if digits is not None:
        values = values.round(decimals=digits)
    return values.tolist()


def to_lists_with_nulls(t: Tensor) -> list:
    """Like to_lists, but -inf, +inf and NaN become None (JSON null)."""
    values = t.detach().cpu()
    if values.dtype in NARROW_FLOATS:
        return _shortest_float32(values)  # orjson writes a non-finite number as null

    def clean(x):
        if isinstance(x, list):
            return [clean(v) for v in x]
        return x if math.isfinite(x) else None

    return clean(values.to(torch.float64).tolist())


def _shortest_float32(values: Tensor) -> list | float | None:
    """Nested lists of the shortest decimals that read back as the tensor's float32 values."""
    flat = _host_array(values.reshape(-1) if values.dim() == 0 else values)
    read = orjson.loads(orjson.dumps(flat, option=orjson.OPT_SERIALIZE_NUMPY))
    return read[0] if values.dim() == 0 else read


def to_bool_lists(t: Tensor) -> list:
    return t.detach().bool().cpu().tolist()


def float32_json_rows(block: Tensor) -> bytes:
    """A 2-D float32 block (rows, cols) as its rows' JSON arrays joined by commas, with no
    outer brackets: b"[0.25,0.75],[1.0,0.0]".

    Each number is orjson's shortest decimal that reads back as exactly the same float32
    (0.1, not 0.100000001): at most 15 characters for a weight in [0, 1] (0.0000019631896),
    checked over every float32 from 0 to 1. Non-finite values would become null.
    """
    return orjson.dumps(_host_array(block), option=orjson.OPT_SERIALIZE_NUMPY)[1:-1]


def _host_array(t: Tensor):
    """The tensor as a C-ordered numpy array on the host, as orjson writes it: float32 (bool
    kept as bool)."""
    t = t.detach().cpu()
    if t.dtype != torch.bool:
        t = t.to(torch.float32)
    return t.contiguous().numpy()


def json_with_float32(fields: dict) -> bytes:
    """A JSON object of `fields` in their order, where a float tensor is written as nested arrays
    of float32 numbers in float32_json_rows' form (shortest, exact) and a bool tensor as nested
    arrays of true and false, at orjson's speed: a 320 x 320 window's 102,400 weights as
    pydantic and json would write them (float64 digits) were 2.3 MB in 11 ms. Dicts are
    followed into; other values must be JSON-ready (str, int, float, list, None)."""

    def ready(value):
        if isinstance(value, dict):
            return {k: ready(v) for k, v in value.items()}
        return _host_array(value) if isinstance(value, Tensor) else value

    return orjson.dumps(ready(fields), option=orjson.OPT_SERIALIZE_NUMPY)


def in_order(fields: dict, model: type[BaseModel]) -> dict:
    """`fields` in the order `model` declares them (the order its documented JSON has); every
    field of the model must be there."""
    return {name: fields[name] for name in model.model_fields}


# ---------------------------------------------------------------------------------------------
# Compact binary attention maps (format=f16 and format=u8)
#
# Body layout, all integers little-endian:
#   magic     4 bytes   b"ATLS"
#   version   uint8     1
#   dtype     uint8     1 = float16, 2 = uint8, 3 = float32
#   reserved  uint16    0
#   meta_len  uint32    length of the metadata in bytes
#   metadata  meta_len bytes of UTF-8 JSON: the JSON response without "attentions", plus
#             "shape" [layers, heads, rows, cols], "dtype", "error_bound" and "decode" (rows =
#             cols = seq, or ceil(seq / cell) where the request pools blocks)
#   padding   zero bytes so that the data starts at a multiple of 8
#   data      layers*heads*rows*cols values in C order [layer][head][query][key]
# float32: IEEE single, exact.
# float16: IEEE half, |decoded - exact| <= 2^-12 for weights in [0, 1].
# uint8:   w ≈ q / 255 with q = round(w * 255), |decoded - exact| <= 1/510.
# ---------------------------------------------------------------------------------------------

BINARY_MAGIC = ATLS_MAGIC
BINARY_VERSION = ATLS_VERSION
F16_ERROR_BOUND = 2.0**-12
U8_ERROR_BOUND = 1.0 / 510.0
BINARY_FORMATS = {
    "f16": (1, F16_ERROR_BOUND, "w = float16 value"),
    "u8": (2, U8_ERROR_BOUND, "w = q / 255"),
    "f32": (3, 0.0, "w = float32 value"),
}
BINARY_MEDIA_TYPE = "application/vnd.attention-atlas.maps"

# Standard containers, float32 and exact, readable with no decoder of ours:
# safetensors: one tensor "attentions" of that shape; the header's __metadata__ holds
#              {"atlas": the JSON answer without "attentions"} (safetensors metadata is str -> str).
# npy:         numpy's .npy (format 1.0) of the same array, weights only (the tokens come from a
#              JSON or safetensors answer for the same text).
STANDARD_MEDIA_TYPES = {
    "safetensors": "application/vnd.safetensors",
    "npy": "application/x-npy",
}
MEDIA_TYPES = {"json": "application/json", **dict.fromkeys(BINARY_FORMATS, BINARY_MEDIA_TYPE)}
MEDIA_TYPES.update(STANDARD_MEDIA_TYPES)


JSON_BYTES_PER_WEIGHT = 16  # at most: a weight is 15 characters (float32_json_rows), plus a comma
BYTES_PER_WEIGHT = {
    "json": JSON_BYTES_PER_WEIGHT, "f32": 4, "f16": 2, "u8": 1, "safetensors": 4, "npy": 4,
}  # fmt: skip
PIECE_BYTES = 1 << 20  # a streamed answer is produced about this much at a time (a lane's trip)
BINARY_PIECE_BYTES = SEND_CHUNK_BYTES
"""A binary answer's pieces are at most this (but a head longer than it), so SendGuard hands
each to the server as it is, with no slice of its own to copy; a trip to a compute lane makes
PIECE_BYTES // BINARY_PIECE_BYTES of them (MapsAnswer.pieces_per_trip)."""


U8_STEP = 1 << 16
"""Weights coded to u8 at a time. Their float64 scratch (512 KiB) stays under glibc's mmap
threshold (app.memory fixes it at 1 MiB), so one buffer is reused from the heap instead of a new
mapping being faulted in for every piece: a 512-token MiniLM layer (3.1 million weights) took
10.0 ms in one go and 3.9 ms this way."""


def quantize(weights: Tensor, fmt: str) -> bytes:
    """Attention weights in [0, 1] as f32, f16 or u8 bytes, C order, little-endian."""
    out = torch.empty(weights.numel() * BYTES_PER_WEIGHT[fmt], dtype=torch.uint8)
    quantize_into(weights, fmt, out)
    return out.numpy().tobytes()


def quantize_into(weights: Tensor, fmt: str, out: Tensor) -> None:
    """Write attention weights in [0, 1] into `out` (uint8, as many bytes as they take in
    `fmt`) as f32, f16 or u8, C order, little-endian: an answer's piece is coded in place."""
    flat = weights.reshape(-1)
    if fmt in ("f32", "f16"):
        wire = "<f4" if fmt == "f32" else "<f2"
        dtype = torch.float32 if fmt == "f32" else torch.float16
        out.numpy().view(wire)[:] = flat.to(dtype).numpy()
        return
    if fmt != "u8":
        raise ValueError(f"unknown binary format {fmt!r}")
    # In float64, w * 255 is exact for every float32 w (24 + 8 bits < 53), so the rounding is
    # too: in float32 the product can land on k + 0.5 and round past the 1/510 bound.
    n = flat.numel()
    scratch = torch.empty(min(n, U8_STEP), dtype=torch.float64)
    for start in range(0, n, U8_STEP):
        stop = min(n, start + U8_STEP)
        scaled = scratch[: stop - start].copy_(flat[start:stop]).mul_(255)
        out[start:stop] = scaled.round_().clamp_(0, 255)  # whole numbers: exact in u8


def _meta_bytes(tokens: int) -> int:
    """An upper bound on an answer's fields besides its numbers: 320 bytes a token (its label,
    raw form, id and flags) and 4 KiB for the rest."""
    return 320 * tokens + 4096


JSON_BYTES_PER_NUMBER = 17
"""At most, any finite float32 in json_with_float32's JSON, with its comma: a sign and 15
characters (measured over every positive finite float32, e.g. 0.0000019631896)."""


def json_bytes_bound(numbers: int, tokens: int, chars: int = 0) -> int:
    """An upper bound on a JSON answer (json_with_float32) holding `numbers` float32 values (or
    booleans), `tokens` token strings and `chars` characters of the request's own text (6 bytes
    a character at most: a control character's \\u escape), from the request alone."""
    return numbers * JSON_BYTES_PER_NUMBER + 6 * chars + _meta_bytes(tokens)


def answer_bytes_bound(fmt: str, weights: int, tokens: int) -> int:
    """An upper bound on the size of a maps answer, from the request alone (before any work):
    the weights at their format's width plus room for the metadata (tokens and ids)."""
    return weights * BYTES_PER_WEIGHT[fmt] + _meta_bytes(tokens)


PIECES_HELD = 3
"""Pieces of PIECE_BYTES a streamed maps answer's process may hold at once: a piece being made
(a JSON piece as its parts and as the piece they are joined into; a trip's binary pieces, with
the buffer they are coded in and a scratch of U8_STEP float64s), and the piece before it (being
sent, or, at the start, made with it: app.api.running.stream_maps makes the first two
together)."""


def sending_overhead(nbytes: int) -> int:
    """What sending an answer of nbytes holds besides its own bytes: the slice SendGuard copies
    for the server, the server's unsent rest of it, and what the kernel takes into the
    connection's send buffer (KERNEL_SEND_BUFFER_BYTES); each never more than the answer."""
    return 2 * min(nbytes, SEND_CHUNK_BYTES) + min(nbytes, KERNEL_SEND_BUFFER_BYTES)


def held_while_sending(fmt: str, weights: int, tokens: int) -> int:
    """At most the bytes a maps answer (MapsAnswer) holds while a reader takes it, from the
    request alone: PIECES_HELD pieces (each at most PIECE_BYTES, or the answer's head where that
    is longer, and never more than the whole answer) and sending_overhead."""
    whole = answer_bytes_bound(fmt, weights, tokens)
    piece = PIECE_BYTES + _meta_bytes(tokens)
    return min(whole, PIECES_HELD * piece) + sending_overhead(whole)


@dataclass(frozen=True)
class MapsAnswer:
    """Attention maps framed for the wire, produced piece by piece.

    layer_maps(i) returns the i-th requested layer's maps, (heads, q_len, k_len) float32; the
    body is built from those one block of rows at a time, so no second copy of all the maps
    is ever held. shape is (layers, heads, q_len, k_len).
    """

    meta: dict
    fmt: str
    shape: tuple[int, int, int, int]
    layer_maps: Callable[[int], Tensor]
    held: bool = False  # every layer's maps are in memory already: the pieces only encode them

    @property
    def media_type(self) -> str:
        return MEDIA_TYPES[self.fmt]

    @cached_property
    def head(self) -> bytes:
        """Everything before the weights, for the binary and standard formats (built once:
        both the Content-Length and the body need it)."""
        if self.fmt == "safetensors":
            return safetensors_head(self.meta, self.shape)
        if self.fmt == "npy":
            return npy_head(self.shape)
        return self._binary_head()

    def _binary_head(self) -> bytes:
        code, bound, decode = BINARY_FORMATS[self.fmt]
        meta = {
            **self.meta,
            "shape": list(self.shape),
            "dtype": self.fmt,
            "error_bound": bound,
            "decode": decode,
        }
        meta_bytes = json.dumps(meta, ensure_ascii=False, allow_nan=False).encode("utf-8")
        head = (
            BINARY_MAGIC
            + struct.pack("<BBHI", BINARY_VERSION, code, 0, len(meta_bytes))
            + meta_bytes
        )
        return head + b"\0" * (-len(head) % 8)

    @property
    def content_length(self) -> int | None:
        """Exact size of a binary body; None for JSON (its numbers vary in width)."""
        if self.fmt == "json":
            return None
        return len(self.head) + math.prod(self.shape) * BYTES_PER_WEIGHT[self.fmt]

    def chunks(self) -> Iterator[bytes]:
        """The body in pieces: JSON's of about PIECE_BYTES (small layers share a piece), a
        binary answer's of about BINARY_PIECE_BYTES, made pieces_per_trip at a time on a compute
        lane: each trip costs the server a hop to its thread pool, so fewer is faster."""
        if self.fmt == "json":
            yield from _joined(self._json_parts())
        else:
            yield from self._binary_pieces()

    @property
    def pieces_per_trip(self) -> int:
        """Pieces of chunks() to make in one trip to a compute lane: about PIECE_BYTES."""
        return 1 if self.fmt == "json" else PIECE_BYTES // BINARY_PIECE_BYTES

    def _binary_pieces(self) -> Iterator[bytes]:
        """The binary body: the head, then each layer's rows in blocks of at most about
        BINARY_PIECE_BYTES, gathered into pieces as _joined gathers parts, each block coded
        straight into one buffer reused for every piece, and each piece copied out of it as
        bytes. Coding each block to bytes and joining them copied every weight twice more (2 of
        the 5 copies a 128-token MiniLM answer made on its way to the socket); a new buffer for
        each piece of 1 MiB was a fresh mapping, its pages faulted in and zeroed, which SendGuard
        then copied in slices on the event loop (cached 510-token MiniLM answers of every layer
        in u8: 59-62 ms then, 53-59 ms this way)."""
        wire = "f32" if self.fmt in STANDARD_MEDIA_TYPES else self.fmt
        layers, heads, rows, cols = self.shape
        row_bytes = cols * BYTES_PER_WEIGHT[wire]
        block_rows = max(1, BINARY_PIECE_BYTES // max(row_bytes, 1))
        parts = [(-1, 0, len(self.head))] + [
            (layer, start, min(start + block_rows, heads * rows) - start)
            for layer in range(layers)
            for start in range(0, heads * rows, block_rows)
        ]  # (layer, its first row, rows), the head as layer -1 with its bytes for rows
        current, maps = -1, None
        scratch = Scratch()  # the buffer every piece is coded in

        def part_bytes(part: tuple[int, int, int]) -> int:
            layer, _, count = part
            return count * row_bytes if layer >= 0 else count

        for piece in _gathered(parts, part_bytes, BINARY_PIECE_BYTES):
            out = scratch.take("piece", (sum(size for _, size in piece),), torch.uint8)
            offset = 0
            for (layer, start, count), size in piece:
                if layer < 0:
                    out.numpy()[:size] = numpy.frombuffer(self.head, dtype=numpy.uint8)
                else:
                    if layer != current:
                        maps = self.layer_maps(layer)
                        if tuple(maps.shape) != (heads, rows, cols):
                            raise ValueError(f"layer {layer}'s maps are {tuple(maps.shape)}")
                        maps, current = maps.reshape(heads * rows, cols), layer
                    quantize_into(maps[start : start + count], wire, out[offset : offset + size])
                offset += size
            yield out.numpy().tobytes()

    def _json_parts(self) -> Iterator[bytes]:
        """The JSON body in the order it is written, in parts of any size."""
        head = json.dumps(self.meta, ensure_ascii=False, allow_nan=False)
        yield (head[:-1] + ', "attentions": [').encode("utf-8")
        for i in range(self.shape[0]):
            maps = self.layer_maps(i)  # (heads, q, k)
            yield b"[" if i == 0 else b",["
            for h, head_map in enumerate(maps):
                rows = max(1, PIECE_BYTES // (head_map.shape[-1] * JSON_BYTES_PER_WEIGHT))
                for start in range(0, head_map.shape[0], rows):
                    opener = (b"[" if h == 0 else b",[") if start == 0 else b","
                    yield opener + float32_json_rows(head_map[start : start + rows])
                yield b"]"
            yield b"]"
        yield b"]}"


def _joined(parts: Iterator[bytes]) -> Iterator[bytes]:
    """Parts gathered into pieces of about PIECE_BYTES (_gathered), each joined into one: each
    piece is a trip to a compute lane and a read by the client, so a small answer goes out in
    one."""
    for piece in _gathered(parts, len):
        yield b"".join(part for part, _ in piece)


def _gathered(
    parts: Iterable[T], size: Callable[[T], int], limit: int = PIECE_BYTES
) -> Iterator[list[tuple[T, int]]]:
    """Parts gathered into pieces of about `limit` bytes, as [(part, its size)]: a part is never
    split, and a piece ends before the part that would take it past `limit`."""
    pending, total = [], 0
    for part in parts:
        nbytes = size(part)
        if total and total + nbytes > limit:
            yield pending
            pending, total = [], 0
        pending.append((part, nbytes))
        total += nbytes
    if pending:
        yield pending


def safetensors_head(meta: dict, shape: tuple[int, ...]) -> bytes:
    """A safetensors header for one float32 tensor "attentions" of `shape`, the answer's JSON
    fields in __metadata__["atlas"]; padded with spaces to 8 bytes, as the format allows."""
    size = math.prod(shape) * 4
    header = {
        "__metadata__": {"atlas": json.dumps(meta, ensure_ascii=False, allow_nan=False)},
        "attentions": {"dtype": "F32", "shape": list(shape), "data_offsets": [0, size]},
    }
    text = json.dumps(header, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
    text += b" " * (-(8 + len(text)) % 8)
    return struct.pack("<Q", len(text)) + text


def npy_head(shape: tuple[int, ...]) -> bytes:
    """A .npy (format 1.0) header for a little-endian float32 C-order array of `shape`."""
    described = f"{{'descr': '<f4', 'fortran_order': False, 'shape': {tuple(shape)}, }}"
    raw = described.encode("latin1")
    padding = -(10 + len(raw) + 1) % 64  # the data starts at a multiple of 64 bytes
    raw += b" " * padding + b"\n"
    return b"\x93NUMPY\x01\x00" + struct.pack("<H", len(raw)) + raw


def decode_binary(body: bytes) -> tuple[dict, Tensor]:
    """Inverse of the binary format: (metadata, float32 weights). Used by tests; Python clients
    use atlas_engine.formats, which needs no torch."""
    meta, values = decode_atls(body)
    return meta, torch.from_numpy(values.copy())
