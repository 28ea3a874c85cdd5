"""A small client for a running Atlas server: answers as numpy arrays, no torch needed.

from attention_atlas import AtlasClient
atlas = AtlasClient("http://127.0.0.1:8000")
maps = atlas.attention("sentence-transformers/all-MiniLM-L6-v2", "The cat sat.")
maps.weights.shape  # (layers, heads, seq, seq), float32
maps.timing  # where the server's time went, in ms: {"app": 10.6, ..., "forward": 8.0}
"""

from __future__ import annotations

import gzip
import json
import urllib.error
import urllib.request
from dataclasses import dataclass, field

import numpy as np

from attention_atlas.formats import decode_maps

FORMATS = ("json", "f32", "f16", "u8", "safetensors", "npy")
ACCEPT_ENCODING = "zstd, br, gzip"


class AtlasError(RuntimeError):
    """The server refused the request; `status` and the server's `detail` say why."""

    def __init__(self, status: int, detail: str) -> None:
        super().__init__(f"{status}: {detail}")
        self.status = status
        self.detail = detail


@dataclass(frozen=True)
class Maps:
    """weights[i, j, q, k]: the weight query q gives key k in layers[i], heads[j].
    error_bound is the largest |weights - exact| the format allows (0 for exact formats).
    timing: where the server says its time went, {stage: milliseconds} (server_timing)."""

    weights: np.ndarray
    meta: dict
    error_bound: float
    timing: dict[str, float] = field(default_factory=dict)

    @property
    def tokens(self) -> list[str] | None:
        return self.meta.get("tokens")


@dataclass(frozen=True)
class HeadStatistics:
    """statistics[name][i, h]: the statistic of head h of layers[i] (NaN where no query row
    qualifies); roles[i][h]: its roles, strongest first; descriptions[name]: what each
    measures. 'marked' is there where the request marked tokens."""

    statistics: dict[str, np.ndarray]
    roles: list[list[list[dict]]]
    layers: list[int]
    tokens: list[str]
    descriptions: dict[str, str]
    timing: dict[str, float] = field(default_factory=dict)

    def strongest(self, name: str, count: int = 5) -> list[tuple[int, int, float]]:
        """The `count` heads with the largest `name`, as (layer, head, value), largest first."""
        grid = self.statistics[name]
        order = np.argsort(np.nan_to_num(grid, nan=-np.inf), axis=None)[::-1][:count]
        rows, heads = np.unravel_index(order, grid.shape)
        return [
            (self.layers[r], int(h), float(grid[r, h])) for r, h in zip(rows, heads, strict=True)
        ]


def server_timing(value: str | None) -> dict[str, float]:
    """{stage: milliseconds} of a Server-Timing header ('app;dur=10.6, forward;dur=8.0'); a
    metric without a duration reads 0. The server names `app`, `queue` and `compute`, and
    `load`, `tokenize` and `forward` where they happened (README, "REST API")."""
    metrics = {}
    for metric in filter(None, (part.strip() for part in (value or "").split(","))):
        name, *params = (piece.strip() for piece in metric.split(";"))
        durations = [p.split("=", 1)[1] for p in params if p.startswith("dur=")]
        metrics[name] = float(durations[0]) if durations else 0.0
    return metrics


@dataclass(frozen=True)
class _Answer:
    body: bytes
    content_type: str
    timing: dict[str, float]


def _decompress(body: bytes, encoding: str | None) -> bytes:
    if not encoding or encoding == "identity":
        return body
    if encoding == "gzip":
        return gzip.decompress(body)
    if encoding == "br":
        import brotli

        return brotli.decompress(body)
    if encoding == "zstd":
        import zstandard

        return zstandard.ZstdDecompressor().decompressobj().decompress(body)
    raise ValueError(f"the server answered an encoding this client did not offer: {encoding}")


class AtlasClient:
    def __init__(self, base_url: str = "http://127.0.0.1:8000", timeout: float = 120.0) -> None:
        self.base_url = base_url.rstrip("/")
        self.timeout = timeout

    def _call(self, path: str, body: dict | None = None) -> _Answer:
        request = urllib.request.Request(
            self.base_url + path,
            data=None if body is None else json.dumps(body).encode("utf-8"),
            headers={"Content-Type": "application/json", "Accept-Encoding": ACCEPT_ENCODING},
            method="GET" if body is None else "POST",
        )
        try:
            with urllib.request.urlopen(request, timeout=self.timeout) as response:
                raw = response.read()
                return _Answer(
                    _decompress(raw, response.headers.get("Content-Encoding")),
                    response.headers.get("Content-Type", ""),
                    server_timing(response.headers.get("Server-Timing")),
                )
        except urllib.error.HTTPError as err:
            text = _decompress(err.read(), err.headers.get("Content-Encoding"))
            try:
                detail = json.loads(text).get("detail", text.decode("utf-8", "replace"))
            except ValueError:
                detail = text.decode("utf-8", "replace")
            raise AtlasError(err.code, str(detail)) from None

    def get_json(self, path: str) -> dict:
        return json.loads(self._call(path).body)

    def post_json(self, path: str, body: dict) -> dict:
        return json.loads(self._call(path, body).body)

    def models(self) -> list[dict]:
        """The models this server can load, with their shapes and whether each is available."""
        return self.get_json("/api/models")["models"]

    def attention(
        self,
        model: str,
        text: str,
        text_pair: str | None = None,
        *,
        layers: list[int] | None = None,
        heads: list[int] | None = None,
        format: str = "f32",
        cell: int = 1,
        reduce: str = "max",
    ) -> Maps:
        """Attention maps of `model` on `text` as float32 numpy arrays, from any format. With
        cell above 1, each cell x cell block of weights comes back as its max or mean (`reduce`):
        weights then has ceil(seq / cell) values a side."""
        pooling = {"cell": cell, "reduce": reduce} if cell != 1 else None
        return self._maps("/api/attention", model, text, text_pair, layers, heads, format, pooling)

    def aggregate(
        self, model: str, text: str, kind: str = "rollout", *, layers: list[int] | None = None,
        residual: float = 0.5, format: str = "f32",
    ) -> Maps:  # fmt: skip
        """Each layer's head average ("average") or attention rollout ("rollout")."""
        body = {"kind": kind, "residual": residual}
        return self._maps("/api/attention/aggregate", model, text, None, layers, None, format, body)

    def heads(
        self,
        model: str,
        text: str,
        *,
        layers: list[int] | None = None,
        marked: list[int] | None = None,
        read_from: list[int] | None = None,
    ) -> HeadStatistics:
        """Every head's statistics and roles on `text` (POST /api/attention/heads). marked:
        token positions whose share of each head's attention becomes the statistic 'marked',
        averaged over the rows that read them from elsewhere, or over the `read_from` rows (the
        last token of a question about a passage finds retrieval heads)."""
        body = {"model": model, "text": text}
        for name, value in (("layers", layers), ("marked", marked), ("read_from", read_from)):
            if value is not None:
                body[name] = value
        called = self._call("/api/attention/heads", body)
        answer = json.loads(called.body)
        return HeadStatistics(
            statistics={
                name: np.array(grid, dtype=np.float64).astype(np.float32)
                for name, grid in answer["statistics"].items()
            },
            roles=answer["roles"],
            layers=answer["layers"],
            tokens=answer["tokens"],
            descriptions=answer["descriptions"],
            timing=called.timing,
        )

    def _maps(self, path, model, text, text_pair, layers, heads, format, extra=None) -> Maps:
        if format not in FORMATS:
            raise ValueError(f"format must be one of {FORMATS}")
        body = {"model": model, "text": text, "format": format, **(extra or {})}
        for name, value in (("text_pair", text_pair), ("layers", layers), ("heads", heads)):
            if value is not None:
                body[name] = value
        answer = self._call(path, body)
        meta, weights = decode_maps(answer.body, answer.content_type)
        return Maps(weights, meta, float(meta.get("error_bound", 0.0)), answer.timing)
