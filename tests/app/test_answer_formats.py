"""Issue 12.4-5: maps as safetensors and .npy (no decoder of ours), and compressed answers."""

import gzip
import io
import json

import brotli
import numpy as np
import pytest
import torch
import zstandard
from safetensors.numpy import load

from atlas_engine.models.registry import MINILM_ID
from atlas_engine.serialize import JSON_BYTES_PER_WEIGHT, decode_binary, float32_json_rows

BODY = {"model": MINILM_ID, "text": "Standard formats need no decoder.", "layers": [0, 5]}


def post(client, headers=None, **extra):
    response = client.post("/api/attention", json={**BODY, **extra}, headers=headers or {})
    assert response.status_code == 200, response.text
    return response


@pytest.fixture(scope="module")
def exact(client):
    return post(client).json()


def test_safetensors_holds_the_exact_maps_and_the_answer_fields(client, exact):
    response = post(client, format="safetensors")
    assert response.headers["content-type"] == "application/vnd.safetensors"
    maps = load(response.content)["attentions"]
    n = len(exact["tokens"])
    assert maps.dtype == np.float32 and maps.shape == (2, 12, n, n)
    assert np.array_equal(maps, np.array(exact["attentions"], dtype=np.float32))
    header_len = int.from_bytes(response.content[:8], "little")
    header = json.loads(response.content[8 : 8 + header_len])
    meta = json.loads(header["__metadata__"]["atlas"])
    assert meta["tokens"] == exact["tokens"] and meta["layers"] == [0, 5]
    assert (8 + header_len) % 8 == 0  # the data is aligned, as safetensors readers expect


def test_npy_is_numpys_own_format(client, exact):
    response = post(client, format="npy", heads=[3])
    assert response.headers["content-type"] == "application/x-npy"
    maps = np.load(io.BytesIO(response.content), allow_pickle=False)
    expected = np.array(exact["attentions"], dtype=np.float32)[:, [3]]
    assert maps.dtype == np.float32 and np.array_equal(maps, expected)


def test_aggregate_answers_take_the_standard_formats_too(client):
    body = {**BODY, "kind": "rollout", "format": "safetensors"}
    response = client.post("/api/attention/aggregate", json=body)
    assert response.status_code == 200, response.text
    rows = load(response.content)["attentions"].sum(axis=-1)
    assert np.allclose(rows, 1, atol=1e-5)


DECODERS = {
    "zstd": lambda wire: zstandard.ZstdDecompressor().decompressobj().decompress(wire),
    "br": brotli.decompress,
    "gzip": gzip.decompress,
}


def raw_answer(client, accept: str, **extra) -> tuple[str | None, bytes]:
    """(Content-Encoding, the bytes as sent) for a maps request offering `accept`."""
    with client.stream(
        "POST", "/api/attention", json={**BODY, **extra}, headers={"Accept-Encoding": accept}
    ) as response:
        assert response.status_code == 200
        return response.headers.get("content-encoding"), b"".join(response.iter_raw())


LONGER = (
    "Compression pays on real answers: most weights of a long input are close to zero, and "
    "quantised to one byte they repeat, so a general-purpose compressor finds them. "
) * 3


def test_answers_are_compressed_with_what_the_client_accepts(client):
    encoding, plain = raw_answer(client, "identity", format="u8", text=LONGER)
    assert encoding is None and plain.startswith(b"ATLS")
    for offered in ("zstd", "br", "gzip"):
        encoding, wire = raw_answer(client, offered, format="u8", text=LONGER)
        meta, maps = decode_binary(DECODERS[offered](wire))
        assert encoding == offered and meta["cached"]  # the same maps, only "cached" differs
        assert meta["tokens"] == decode_binary(plain)[0]["tokens"]
        assert maps.equal(decode_binary(plain)[1])
        assert len(wire) < len(plain) / 2
    assert raw_answer(client, "gzip, br, zstd", format="u8")[0] == "zstd"  # the fastest first


def test_json_is_compressed_and_float_containers_are_not(client):
    assert raw_answer(client, "zstd")[0] == "zstd"
    for fmt in ("safetensors", "npy"):
        answer = post(client, headers={"Accept-Encoding": "zstd"}, format=fmt)
        assert "content-encoding" not in answer.headers
        assert int(answer.headers["content-length"]) == len(answer.content)


def test_an_unknown_format_is_a_clear_422(client):
    response = client.post("/api/attention", json={**BODY, "format": "hdf5"})
    assert response.status_code == 422 and response.json()["code"] == "invalid_field"
    assert "safetensors" in response.json()["detail"]  # the message lists what is accepted


def test_json_numbers_read_back_as_the_same_float32_within_the_sizing_width():
    """Every JSON weight is the shortest decimal of its float32, never wider than the answer's
    size bound allows: random bit patterns over [0, 1] plus the widest kind (a 15-character
    0.00000ddddddddd) and the ends."""
    bits = np.random.default_rng(14).integers(0, 0x3F800001, size=(500, 400), dtype=np.uint32)
    widest = np.float32(0.0000019631896).view(np.uint32)
    edges = np.array([0, 1, 0x34000000, widest, 0x3F7FFFFF, 0x3F800000], np.uint32)  # to 1.0
    bits[0, : len(edges)] = edges
    text = float32_json_rows(torch.from_numpy(bits.view(np.float32)))
    back = np.array(json.loads(b"[" + text + b"]"), dtype=np.float32)
    assert back.shape == bits.shape and (back.view(np.uint32) == bits).all()
    widths = [len(number) for number in text.replace(b"[", b"").replace(b"]", b"").split(b",")]
    assert max(widths) == JSON_BYTES_PER_WEIGHT - 1  # the widest, and a comma, fit the bound
