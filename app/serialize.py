"""The one place where tensors become JSON-ready lists (and, for the model API, bytes)."""

from __future__ import annotations

import json
import math
import struct

import numpy as np
import torch
from torch import Tensor


def to_lists(t: Tensor, digits: int | None = None) -> list:
    """A float tensor as nested lists of Python floats, optionally rounded.

    Non-finite values are not valid JSON; use to_lists_with_nulls where they can occur.
    """
    values = t.detach().to(torch.float64).cpu()
    if digits is not None:
        values = values.round(decimals=digits)
    return values.tolist()


def to_lists_with_nulls(t: Tensor) -> list:
    """Like to_lists, but -inf, +inf and NaN become None (JSON null)."""

    def clean(x):
        if isinstance(x, list):
            return [clean(v) for v in x]
        return x if math.isfinite(x) else None

    return clean(to_lists(t))


def to_bool_lists(t: Tensor) -> list:
    return t.detach().bool().cpu().tolist()


def float32_json(t: Tensor) -> str:
    """A float32 tensor as JSON nested arrays, each number with 9 significant digits.

    Nine significant digits is enough for every float32 to read back as exactly the same
    float32, and takes about 13 bytes a number instead of the 20+ of float64 reprs.
    """
    values = t.detach().to(torch.float32).cpu()
    if values.dim() == 0:
        return format(values.item(), ".9g")
    rows = values.reshape(-1, values.shape[-1]).tolist() if values.numel() else []
    text_rows = ["[" + ",".join([format(x, ".9g") for x in row]) + "]" for row in rows]
    for size in reversed(values.shape[:-1]):
        text_rows = [
            "[" + ",".join(text_rows[i : i + size]) + "]" for i in range(0, len(text_rows), size)
        ]
    return text_rows[0] if text_rows else "[]"


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
#             "shape" [layers, heads, seq, seq], "dtype", "error_bound" and "decode"
#   padding   zero bytes so that the data starts at a multiple of 8
#   data      layers*heads*seq*seq values in C order [layer][head][query][key]
# float32: IEEE single, exact.
# float16: IEEE half, |decoded - exact| <= 2^-12 for weights in [0, 1].
# uint8:   w ≈ q / 255 with q = round(w * 255), |decoded - exact| <= 1/510.
# ---------------------------------------------------------------------------------------------

BINARY_MAGIC = b"ATLS"
BINARY_VERSION = 1
F16_ERROR_BOUND = 2.0**-12
U8_ERROR_BOUND = 1.0 / 510.0
BINARY_FORMATS = {
    "f16": (1, F16_ERROR_BOUND, "w = float16 value"),
    "u8": (2, U8_ERROR_BOUND, "w = q / 255"),
    "f32": (3, 0.0, "w = float32 value"),
}
BINARY_MEDIA_TYPE = "application/vnd.attention-atlas.maps"


def quantize(weights: Tensor, fmt: str) -> bytes:
    """Attention weights in [0, 1] as f32, f16 or u8 bytes, C order, little-endian."""
    if fmt == "f32":
        return weights.to(torch.float32).contiguous().numpy().astype("<f4", copy=False).tobytes()
    if fmt == "f16":
        array = weights.to(torch.float16).contiguous().numpy()
        return array.astype("<f2", copy=False).tobytes()
    if fmt == "u8":
        return (weights * 255).round().clamp(0, 255).to(torch.uint8).contiguous().numpy().tobytes()
    raise ValueError(f"unknown binary format {fmt!r}")


def encode_binary(meta: dict, weights: Tensor, fmt: str) -> bytes:
    """The body described above. weights: (layers, heads, seq, seq)."""
    code, bound, decode = BINARY_FORMATS[fmt]
    meta = {
        **meta,
        "shape": list(weights.shape),
        "dtype": fmt,
        "error_bound": bound,
        "decode": decode,
    }
    meta_bytes = json.dumps(meta, ensure_ascii=False, allow_nan=False).encode("utf-8")
    head = (
        BINARY_MAGIC + struct.pack("<BBHI", BINARY_VERSION, code, 0, len(meta_bytes)) + meta_bytes
    )
    padding = b"\0" * (-len(head) % 8)
    return head + padding + quantize(weights, fmt)


def decode_binary(body: bytes) -> tuple[dict, Tensor]:
    """Inverse of encode_binary: (metadata, float32 weights). Used by tests and Python clients."""
    if body[:4] != BINARY_MAGIC:
        raise ValueError("not an Attention Atlas binary map (bad magic)")
    version, code, _, meta_len = struct.unpack("<BBHI", body[4:12])
    if version != BINARY_VERSION:
        raise ValueError(f"unsupported version {version}")
    meta = json.loads(body[12 : 12 + meta_len].decode("utf-8"))
    start = 12 + meta_len
    start += -start % 8
    shape = meta["shape"]
    if code == 3:
        values = np.frombuffer(body, dtype="<f4", offset=start).astype(np.float32)
    elif code == 1:
        values = np.frombuffer(body, dtype="<f2", offset=start).astype(np.float32)
    else:
        values = np.frombuffer(body, dtype=np.uint8, offset=start).astype(np.float32) / 255.0
    return meta, torch.from_numpy(values.reshape(shape).copy())
