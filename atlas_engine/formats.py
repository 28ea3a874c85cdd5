"""Reading every maps answer of the API with numpy alone (no torch, no server package).

Formats (see the API docs): json, our binary layout ("ATLS": f32, f16 or u8), safetensors and
npy. Each decoder returns (metadata, weights): metadata a dict (the answer's fields other than
the maps: tokens, layers, heads, shape ...), weights a float32 numpy array (layers, heads, q, k)
of the layers and heads asked for (q = k = tokens, or ceil(tokens / cell) where cells were
pooled).
"""

from __future__ import annotations

import io
import json
import struct

import numpy as np

ATLS_MAGIC = b"ATLS"
ATLS_VERSION = 1
ATLS_DTYPES = {3: "<f4", 1: "<f2", 2: "u1"}  # code -> stored dtype; u8 decodes as q / 255


def decode_atls(body: bytes) -> tuple[dict, np.ndarray]:
    """(metadata dict, float32 weights (layers, heads, q, k)) of our binary layout: magic,
    version, dtype code, metadata JSON, padding, weights (u8 read as q / 255). A body that is
    not one raises ValueError."""
    if body[:4] != ATLS_MAGIC:
        raise ValueError("not an Attention Atlas binary map (bad magic)")
    version, code, _, meta_len = struct.unpack("<BBHI", body[4:12])
    if version != ATLS_VERSION or code not in ATLS_DTYPES:
        raise ValueError(f"unsupported version {version} or dtype code {code}")
    meta = json.loads(body[12 : 12 + meta_len].decode("utf-8"))
    start = 12 + meta_len
    start += -start % 8
    values = np.frombuffer(body, dtype=ATLS_DTYPES[code], offset=start).astype(np.float32)
    if code == 2:
        values /= 255.0
    return meta, values.reshape(meta["shape"])


def decode_safetensors(body: bytes) -> tuple[dict, np.ndarray]:
    """(metadata dict, float32 weights (layers, heads, q, k)) of a safetensors answer: its
    tensor 'attentions', and the metadata its header keeps under 'atlas'."""
    from safetensors.numpy import load

    header_len = struct.unpack("<Q", body[:8])[0]
    header = json.loads(body[8 : 8 + header_len])
    meta = json.loads(header.get("__metadata__", {}).get("atlas", "{}"))
    return meta, load(body)["attentions"]


def decode_npy(body: bytes) -> tuple[dict, np.ndarray]:
    """({"shape": [layers, heads, q, k]}, float32 weights of that shape) of an npy answer, which
    carries no other metadata (no tokens)."""
    weights = np.load(io.BytesIO(body), allow_pickle=False)
    return {"shape": list(weights.shape)}, weights


def decode_json(body: bytes) -> tuple[dict, np.ndarray]:
    """(the answer's other fields as a dict, its 'attentions' as float32 (layers, heads, q, k))
    of a JSON answer."""
    meta = json.loads(body)
    weights = np.asarray(meta.pop("attentions"), dtype=np.float32)
    return meta, weights


DECODERS = {
    "application/json": decode_json,
    "application/vnd.attention-atlas.maps": decode_atls,
    "application/vnd.safetensors": decode_safetensors,
    "application/x-npy": decode_npy,
}


def decode_maps(body: bytes, content_type: str) -> tuple[dict, np.ndarray]:
    """A maps answer of any format, read by its Content-Type: (metadata, weights), metadata a
    dict (tokens, layers, heads, shape ... as the format carries them; npy only its shape) and
    weights a float32 numpy array (layers, heads, q, k). An unknown Content-Type raises
    ValueError."""
    media = content_type.split(";")[0].strip().lower()
    if media not in DECODERS:
        raise ValueError(f"not a maps answer: {content_type!r}")
    return DECODERS[media](body)
