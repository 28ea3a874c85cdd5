"""A small client for a running Atlas server: answers as numpy arrays, no torch needed.

from attention_atlas import AtlasClient
atlas = AtlasClient("http://127.0.0.1:8000")
maps = atlas.attention("sentence-transformers/all-MiniLM-L6-v2", "The cat sat.")
maps.weights.shape  # (layers, heads, seq, seq), float32
maps.timing  # where the server's time went, in ms: {"app": 10.6, ..., "forward": 8.0}

Every route of the REST API has a method here (its docstring names the route): the maps routes
answer Maps, the head statistics HeadStatistics, the streamed ones (generate, forward) an
iterator of their lines, the others the server's JSON as a dict whose matrices are float32
arrays (null read as NaN). Fields a method does not name go in its **options, by the names of
the request's schema (/docs). A refusal raises AtlasError with the server's status, detail and
code; a server out of reach raises AtlasError naming its URL.
"""

from __future__ import annotations

import difflib
import gzip
import json
import os
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.client import HTTPResponse
from pathlib import Path

import numpy as np

from atlas_engine.formats import decode_maps

FORMATS = ("json", "f32", "f16", "u8", "safetensors", "npy")
ACCEPT_ENCODING = "zstd, br, gzip"


LAB_ROUTES = (
    "masks", "scaling", "scoring", "tiling", "linear", "positions", "cost", "kv-cache",
    "heads", "cross", "sparse", "rope-head", "padding", "what-a-head-is", "forward-pass",
)  # fmt: skip
"""The lab's routes, POST /api/lab/<name> (AtlasClient.lab)."""


class AtlasError(RuntimeError):
    """The server refused the request: `status`, its `detail` and its `code` (e.g.
    'unknown_model') say why. `status` is None when no answer came: the server could not be
    reached, and the detail names the URL tried."""

    def __init__(self, status: int | None, detail: str, code: str | None = None) -> None:
        super().__init__(detail if status is None else f"{status}: {detail}")
        self.status = status
        self.detail = detail
        self.code = code


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
        """The tokens' labels (T strings, one a key), where the answer carries them; None where
        it does not (npy carries none)."""
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
    `load`, `tokenize` and `forward` where they happened (docs/api.md)."""
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


def _refusal(err: urllib.error.HTTPError) -> AtlasError:
    """The server's error answer ({"detail": ..., "code": ...}) as an AtlasError."""
    text = _decompress(err.read(), err.headers.get("Content-Encoding"))
    try:
        answer = json.loads(text)
        return AtlasError(err.code, str(answer["detail"]), answer.get("code"))
    except (ValueError, KeyError, TypeError, AttributeError):
        return AtlasError(err.code, text.decode("utf-8", "replace"))


def _image_type(data: bytes) -> str:
    """The Content-Type of PNG, JPEG or WebP bytes, by their signature (the server checks again
    and refuses anything else)."""
    if data.startswith(b"\x89PNG"):
        return "image/png"
    if data.startswith(b"RIFF") and data[8:12] == b"WEBP":
        return "image/webp"
    return "image/jpeg"


def _body(**fields) -> dict:
    """A request body: the fields given, less those left None (the server's defaults apply)."""
    return {name: value for name, value in fields.items() if value is not None}


def _with_arrays(answer: dict, *names: str) -> dict:
    """`answer` with these fields ('a.weights': field weights of field a) as float32 arrays,
    null read as NaN; a field that is absent or null stays as it is."""
    for name in names:
        *parents, last = name.split(".")
        node = answer
        for parent in parents:
            node = node[parent]
        if node.get(last) is not None:
            node[last] = np.array(node[last], dtype=np.float64).astype(np.float32)
    return answer


ROUTE_HEADER = "X-Atlas-Key"


def route_key(body: dict | None) -> str | None:
    """The routing key of a request about a text: 64-bit FNV-1a of the UTF-8 of model, text and
    text_pair joined by NUL, as 16 hex digits (the web page's api.js computes the same). Sent as
    X-Atlas-Key, so a balancer hashing on it sends every request about one text to the replica
    that has its forward pass cached (docs/deployment.md). None where the body names no text."""
    if not body or not isinstance(body.get("model"), str) or not isinstance(body.get("text"), str):
        return None
    value = 0xCBF29CE484222325
    joined = f"{body['model']}\0{body['text']}\0{body.get('text_pair') or ''}"
    for byte in joined.encode("utf-8", "surrogatepass"):
        value = ((value ^ byte) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return f"{value:016x}"


class AtlasClient:
    """A running Atlas server at `base_url`; every route of its REST API is a method."""

    def __init__(self, base_url: str = "http://127.0.0.1:8000", timeout: float = 120.0) -> None:
        self.base_url = base_url.rstrip("/")
        self.timeout = timeout

    def _open(
        self, path: str, body: dict | bytes | None, encoding: str = ACCEPT_ENCODING,
        kind: str = "application/zip",
    ) -> HTTPResponse:  # fmt: skip
        """The server's answer, open (POST when there is a body, else GET); a bytes body is sent
        as it is, as `kind` (a zip unless told)."""
        raw = isinstance(body, bytes)
        kind = kind if raw else "application/json"
        headers = {"Content-Type": kind, "Accept-Encoding": encoding}
        key = None if raw else route_key(body)
        if key is not None:
            headers[ROUTE_HEADER] = key
        request = urllib.request.Request(
            self.base_url + path,
            data=None if body is None else body if raw else json.dumps(body).encode("utf-8"),
            headers=headers,
            method="GET" if body is None else "POST",
        )
        try:
            return urllib.request.urlopen(request, timeout=self.timeout)
        except urllib.error.HTTPError as err:
            raise _refusal(err) from None
        except OSError as err:  # URLError included: refused, no such host, timed out
            raise self._out_of_reach(err) from None

    def _out_of_reach(self, err: OSError) -> AtlasError:
        reason = getattr(err, "reason", err)
        if isinstance(reason, TimeoutError):
            reason = f"no answer within {self.timeout:g} s"
        return AtlasError(
            None,
            f"cannot reach the Atlas server at {self.base_url} ({reason}); start it with "
            "`make run` (or `python -m app`), or give AtlasClient its address",
        )

    def _call(
        self, path: str, body: dict | bytes | None = None, kind: str = "application/zip"
    ) -> _Answer:
        with self._open(path, body, kind=kind) as response:
            try:
                raw = response.read()
            except OSError as err:
                raise self._out_of_reach(err) from None
            return _Answer(
                _decompress(raw, response.headers.get("Content-Encoding")),
                response.headers.get("Content-Type", ""),
                server_timing(response.headers.get("Server-Timing")),
            )

    def _stream(self, path: str, body: dict) -> Iterator[dict]:
        """A streamed (NDJSON) answer's lines. The request is sent now, so a refusal raises
        here; closing the iterator (or leaving a loop over it) closes the connection, which
        stops the server's work."""
        return self._lines(self._open(path, body, encoding="identity"))  # each line as it comes

    def _lines(self, response: HTTPResponse) -> Iterator[dict]:
        """The JSON lines of a streamed answer as they come; an 'error' line raises AtlasError."""
        with response:
            try:
                for line in response:
                    if not line.strip():
                        continue
                    item = json.loads(line)
                    if item.get("event") == "error":
                        raise AtlasError(item.get("status"), str(item.get("detail", "")))
                    yield item
            except OSError as err:
                raise self._out_of_reach(err) from None

    def get_json(self, path: str) -> dict:
        """GET `path` ('/api/health'): the server's JSON answer, parsed (a dict; lists stay
        lists, no arrays). A refusal raises AtlasError."""
        return json.loads(self._call(path).body)

    def post_json(self, path: str, body: dict) -> dict:
        """POST `body` (a dict, sent as JSON) to `path`: the server's JSON answer, parsed (a
        dict; lists stay lists, no arrays). A refusal raises AtlasError."""
        return json.loads(self._call(path, body).body)

    def health(self) -> dict:
        """GET /api/health: the dict {"status": "ok"} when the server is up."""
        return self.get_json("/api/health")

    def models(self) -> list[dict]:
        """The models this server can load, a list of dicts (id, num_layers, num_heads... and
        whether each is available): the `models` of GET /api/models."""
        return self.get_json("/api/models")["models"]

    def server(self) -> dict:
        """GET /api/models whole, a dict: the models, the default encoder and decoder, the
        device and dtype models run in, and the projections /qkspace offers."""
        return self.get_json("/api/models")

    def load(self, model: str) -> dict:
        """POST /api/models/{model_id}/load: start loading `model` in the background. Returns
        its load status at once, a dict (state 'loading', 'ready' or 'failed', stage,
        fraction)."""
        return self.post_json(f"/api/models/{_quoted(model)}/load", {})

    def load_status(self, model: str) -> dict:
        """GET /api/models/{model_id}/status: how far loading `model` has come, a dict as
        load() returns (state, stage, fraction)."""
        return self.get_json(f"/api/models/{_quoted(model)}/status")

    def induction_text(self, model: str, length: int = 40, seed: int = 0) -> str:
        """GET /api/models/{model_id}/induction-text: a str, `length` random tokens of `model`
        written twice: the standard input for induction heads
        (heads(...).strongest("induction"))."""
        query = urllib.parse.urlencode({"length": length, "seed": seed})
        return self.get_json(f"/api/models/{_quoted(model)}/induction-text?{query}")["text"]

    def core_attention(self, q, k, v, **options) -> dict:
        """POST /api/core/attention: the from-scratch attention on your own q (q_len, d_k),
        k (k_len, d_k) and v (k_len, d_v), lists or arrays; options: mask, window, scale,
        temperature... Returns the server's answer, a dict whose stages are float32 arrays:
        scores, scaled_scores, masked_scores (NaN where masked) and weights (q_len, k_len),
        output (q_len, d_v)."""
        body = _body(q=_listed(q), k=_listed(k), v=_listed(v), **options)
        answer = self.post_json("/api/core/attention", body)
        return _with_arrays(answer, "scores", "scaled_scores", "masked_scores", "weights", "output")

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
        """POST /api/attention: the maps of `model` on `text`, as Maps whose weights are float32
        (layers, heads, T, T): the layers and heads asked for (all by default), T tokens; from
        any format (`format`: how they travel; 'u8' is the smallest, within 1/510). With cell
        above 1, each cell x cell block of weights comes back as its max or mean (`reduce`):
        weights then has ceil(T / cell) values a side."""
        pooling = {"cell": cell, "reduce": reduce} if cell != 1 else None
        return self._maps("/api/attention", model, text, text_pair, layers, heads, format, pooling)

    def aggregate(
        self, model: str, text: str, kind: str = "rollout", *, layers: list[int] | None = None,
        residual: float = 0.5, format: str = "f32",
    ) -> Maps:  # fmt: skip
        """POST /api/attention/aggregate: each layer's head average ("average") or attention
        rollout ("rollout"), as Maps with one 'head': weights float32 (layers, 1, T, T)."""
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
        """POST /api/attention/heads: every head's statistics and roles on `text`. marked:
        token positions whose share of each head's attention becomes the statistic 'marked',
        averaged over the rows that read them from elsewhere, or over the `read_from` rows (the
        last token of a question about a passage finds retrieval heads). Returns
        HeadStatistics: statistics[name] float32 (layers, heads), roles[layer][head]."""
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

    def detail(self, model: str, text: str, layer: int, head: int, **options) -> dict:
        """POST /api/attention/detail: one head in depth, replayed from the model's weights, a
        dict with float32 arrays: q, k, v and products (q[query] ∘ k[j]) (T, head_dim);
        scores, scaled_scores, weights, counterfactual_weights and value_weighted (T, T);
        output (T, head_dim_v); a field the request's `fields` left out is None. options:
        query, scale, temperature (the counterfactual), fields, text_pair."""
        body = _body(model=model, text=text, layer=layer, head=head, **options)
        matrices = ("q", "k", "v", "scores", "scaled_scores", "weights", "output",
                    "counterfactual_weights", "products", "value_weighted")  # fmt: skip
        return _with_arrays(self.post_json("/api/attention/detail", body), *matrices)

    def token(self, model: str, text: str, token: int, **options) -> dict:
        """POST /api/attention/token: follow token `token` through every layer and head, a
        dict with float32 arrays: as_query[layer, head, key] (layers, heads, T) is what it
        attends to, as_key[layer, head, query] (layers, heads, T) what each token gives it;
        query_mean, query_max, key_mean, key_max (layers, T) sum up the heads."""
        body = _body(model=model, text=text, token=token, **options)
        grids = ("as_query", "as_key", "query_mean", "query_max", "key_mean", "key_max")
        return _with_arrays(self.post_json("/api/attention/token", body), *grids)

    def predictions(self, model: str, text: str, top_k: int = 5, **options) -> dict:
        """POST /api/attention/predictions: the model's own top_k candidates at every position
        (a decoder's next token) or at every mask token (an encoder with a masked-LM head), a
        dict: positions[i] = {position, candidates: [{token, token_id, probability}],
        actual_rank}."""
        body = _body(model=model, text=text, top_k=top_k, **options)
        return self.post_json("/api/attention/predictions", body)

    def ablate(self, model: str, text: str, heads: list[tuple[int, int]], **options) -> dict:
        """POST /api/attention/ablate: run again with `heads` ([(layer, head), ...]) switched
        off (options: mode 'zero' or 'mean', the layer and head to show both ways, top_k).
        Returns a dict: positions, each predicted position's top-k both ways, its KL
        divergence and logit change; attention_change[layer, head] (layers, heads), how far
        each later head's rows moved; weights and ablated_weights (T, T), the shown head both
        ways (float32 arrays)."""
        refs = [{"layer": layer, "head": head} for layer, head in heads]
        body = _body(model=model, text=text, heads=refs, **options)
        answer = self.post_json("/api/attention/ablate", body)
        return _with_arrays(answer, "attention_change", "weights", "ablated_weights")

    def compare(self, model: str, text: str, layer: int, head: int, other: dict, **options) -> dict:
        """POST /api/attention/compare: head (layer, head) of `model` on `text` beside
        `other` = {"layer", "head", and optionally "model", "text"}: two heads of one run, one
        head on two texts, or two models. Returns a dict: a.weights and b.weights, float32
        arrays (T, T) of each side's tokens; where the tokens line up (`aligned`), difference
        (b - a, (T, T)) and row_distance (T,), each row's distance; else those are None."""
        body = _body(model=model, text=text, layer=layer, head=head, other=other, **options)
        answer = self.post_json("/api/attention/compare", body)
        return _with_arrays(answer, "a.weights", "b.weights", "difference", "row_distance")

    def qkspace(
        self, model: str, text: str, layer: int, head: int | None = None, **options
    ) -> dict:
        """POST /api/attention/qkspace: one head's (or, head None, every head's) queries and
        keys projected into one plane, a dict: heads[i] = {queries (T, 2), keys (T, 2),
        strongest...}, float32 arrays. options: method ('pca' or 'umap'), strongest."""
        body = _body(model=model, text=text, layer=layer, head=head, **options)
        answer = self.post_json("/api/attention/qkspace", body)
        for space in answer["heads"]:
            _with_arrays(space, "queries", "keys")
        return answer

    def decoder(self, model: str, text: str, target: str, layer: int = 0) -> dict:
        """POST /api/attention/decoder: an encoder-decoder's (T5's) decoder layer `layer` over
        `target` (teacher-forced), a dict: decoder (heads, S, S), its self-attention, and cross
        (heads, S, T), each of the S target tokens' weights over the input's T tokens (float32
        arrays), with target_tokens and tokens."""
        body = _body(model=model, text=text, target=target, layer=layer)
        return _with_arrays(self.post_json("/api/attention/decoder", body), "decoder", "cross")

    def tiles(self, model: str, text: str, layer: int, **options) -> dict:
        """POST /api/attention/tiles: a window of one layer's maps (deep zoom). options:
        heads, rows and cols ([start, stop)), cell, reduce. Returns a dict: values, a float32
        array (heads, rows, cols) (each ceil(n / cell) with cell above 1), with row_tokens,
        col_tokens and the error_bound of the replay."""
        body = _body(model=model, text=text, layer=layer, **options)
        return _with_arrays(self.post_json("/api/attention/tiles", body), "values")

    def search(self, model: str, text: str, query: dict, limit: int = 50) -> list[dict]:
        """POST /api/attention/search: the heads matching `query`, best first, a list of dicts
        {layer, head, value}. query is {"kind": "pair", "source", "target", "above"},
        {"kind": "role", "role"} or {"kind": "rank", "statistic", "order"}."""
        body = _body(model=model, text=text, query=query, limit=limit)
        return self.post_json("/api/attention/search", body)["heads"]

    def similarity(self, model: str, text: str) -> dict:
        """POST /api/attention/similarity: a dict with similarity[a, b], a float32 array
        (layers * heads, layers * heads) between every two heads, numbered
        layer * num_heads + head (1 minus the Jensen-Shannon divergence of their rows), and an
        `order` that puts alike heads side by side."""
        answer = self.post_json("/api/attention/similarity", _body(model=model, text=text))
        return _with_arrays(answer, "similarity")

    def forward(self, model: str, text: str, text_pair: str | None = None) -> Iterator[dict]:
        """POST /api/attention/forward: run (and cache) the forward pass of a long text,
        streamed: an iterator of dicts, {"event": "progress", "layer", "layers"} lines, then
        {"event": "done", tokens, seq_len, num_layers, ...}. A pass that fails raises
        AtlasError."""
        body = _body(model=model, text=text, text_pair=text_pair)
        return self._stream("/api/attention/forward", body)

    def generate(
        self, model: str, text: str, max_new_tokens: int = 16, **options
    ) -> Iterator[dict]:
        """POST /api/attention/generate: a decoder continues `text`, an iterator of dicts, one
        line a token as it is chosen ({"event": "token", token, probability, continuation...}), then
        {"event": "done", text, prompt_tokens, generated, stopped, exact}. options: strategy
        ('greedy' or 'sample'), temperature, top_k, seed. Stop early by leaving the loop."""
        body = _body(model=model, text=text, max_new_tokens=max_new_tokens, **options)
        return self._stream("/api/attention/generate", body)

    def train(self, **config) -> Iterator[dict]:
        """POST /api/lab/train: train the lab's small attention-only model, an iterator of
        dicts: {"event": "started", config, seconds...}, one {"event": "snapshot", step, losses,
        previous_token, induction, maps...} every `every` steps, then {"event": "end", reason,
        model} (the saved model's id when done). config: task ('induction' or 'reverse'),
        layers, heads, d_model, vocab, half, positions, lr, steps, batch, seed, every. Stop
        early by leaving the loop."""
        return self._stream("/api/lab/train", _body(**config))

    def lens(self, model: str, text: str, **options) -> dict:
        """POST /api/attention/lens: the logit lens, a dict. rows ('embeddings', 'after layer
        l'...) by positions: top[row][position] candidates, and one token's token_probability
        and token_rank, float32 arrays (rows, positions). options: top_k, positions, token
        ({"text": " Paris"} or {"id": 7042}; by default the model's top guess at the last
        position)."""
        answer = self.post_json("/api/attention/lens", _body(model=model, text=text, **options))
        return _with_arrays(answer, "token_probability", "token_rank")

    def attribution(self, model: str, text: str, **options) -> dict:
        """POST /api/attention/attribution: direct logit attribution, a dict. heads (layers,
        heads), mlps (layers,) and attention_bias (layers,) as float32 arrays, embeddings and
        bias (floats), whose sum `total` equals the model's `logit`. options: position, target
        and contrast ({"text"} or {"id"}), source ({"layer", "head"}: that head split by key,
        source.values)."""
        body = _body(model=model, text=text, **options)
        answer = self.post_json("/api/attention/attribution", body)
        if answer.get("source"):
            _with_arrays(answer["source"], "values", "weights")
        return _with_arrays(answer, "heads", "mlps", "attention_bias")

    def trace(
        self, model: str, text: str, layer: int, head: int, query: int, key: int, **options
    ) -> dict:
        """POST /api/attention/trace: one head's score from `query` to `key` taken apart into
        the residual stream's pieces, a dict. pieces (labels 'token embedding', 'L2 H5', 'L3
        MLP', 'bias terms'); trace.query_side and trace.key_side (pieces,) and trace.matrix
        (shown + 2, shown + 2), float32 arrays, the pairs summing to `score` within `bound`;
        versus the same for score(key) - score(contrast). options: contrast, top."""
        body = _body(
            model=model, text=text, layer=layer, head=head, query=query, key=key, **options
        )
        answer = self.post_json("/api/attention/trace", body)
        for sides in (answer["trace"], answer.get("versus")):
            if sides:
                _with_arrays(sides, "query_side", "key_side", "matrix")
        return _with_arrays(answer, "weights")

    def circuit(self, model: str, text: str, by: str = "text", **options) -> dict:
        """POST /api/attention/circuit: edges between heads, a dict; `edges` [{from_layer,
        from_head, to_layer, to_head, input, value}] strongest first and node_totals (3,
        layers, heads) a float32 array. by: "text", "weights" or "edges" (then options
        corrupted, and target, contrast, position); options: inputs, top, focus."""
        answer = self.post_json(
            "/api/attention/circuit", _body(model=model, text=text, by=by, **options)
        )
        return _with_arrays(answer, "node_totals")

    def composition(self, model: str, **options) -> dict:
        """POST /api/attention/composition: how heads compose from the weights alone (Q-, K-
        and V-composition of every earlier/later pair against random heads'), a dict with the
        strongest edges; options: kind, top, focus."""
        return self.post_json("/api/attention/composition", _body(model=model, **options))

    def composition_status(self, model: str) -> dict:
        """GET /api/models/{model_id}/composition: how far scoring every pair of `model`'s heads
        has come (the first composition() of a loaded model computes it, seconds; later ones
        read it): a dict with state ('not computed', 'computing' or 'ready'), stage and
        fraction. Starts nothing."""
        return self.get_json(f"/api/models/{_quoted(model)}/composition")

    def patching(self, model: str, text: str, corrupted: str, exact: bool = False, **options):
        """POST /api/attention/patching (exact False: attribution patching, a dict) or
        POST /api/attention/patching/exact (exact True: an iterator of progress lines and then
        the answer, as forward(), whose lists stay lists). heads (layers, heads) and stream
        (layers, positions), float32 arrays (None where not asked for): the share of the
        metric logit(target) - logit(contrast) recovered. options: position, target, contrast,
        components ('heads', 'stream' or 'both')."""
        body = _body(model=model, text=text, corrupted=corrupted, **options)
        if exact:
            return self._stream("/api/attention/patching/exact", body)
        return _with_arrays(self.post_json("/api/attention/patching", body), "heads", "stream")

    def corpus_runs(self) -> list[dict]:
        """GET /api/corpus: the corpus runs the server reads (`atlas corpus run` makes them),
        a list of dicts {id, model, corpus, sequence_tokens, planned, done, statistics,
        layers, heads}."""
        return self.get_json("/api/corpus")["runs"]

    def corpus_heads(self, run: int) -> dict:
        """GET /api/corpus/{run_id}/heads, a dict: statistics[name] and spread[name], float32
        (layers, heads) arrays of means and standard deviations over the run's texts, and each
        head's roles."""
        answer = self.get_json(f"/api/corpus/{int(run)}/heads")
        for part in ("statistics", "spread"):
            answer[part] = {k: np.array(v, dtype=np.float64).astype(np.float32)
                            for k, v in answer[part].items()}  # fmt: skip
        return answer

    def corpus_head(self, run: int, layer: int, head: int, **query) -> dict:
        """GET /api/corpus/{run_id}/heads/{layer}/{head}: one head's dashboard over the corpus,
        a dict (histograms, texts by decile of `metric`, top tokens, distance histogram). query:
        metric, per_decile."""
        suffix = f"?{urllib.parse.urlencode(query)}" if query else ""
        return self.get_json(f"/api/corpus/{int(run)}/heads/{int(layer)}/{int(head)}{suffix}")

    def corpus_headvis(self, run: int, layer: int, head: int) -> dict:
        """GET /api/corpus/{run_id}/heads/{layer}/{head}/headvis: one head as HeadVis shows it,
        a dict (its six metrics, sampled sequences with sparse maps, distance histogram, top
        tokens, max-activation histogram)."""
        return self.get_json(f"/api/corpus/{int(run)}/heads/{int(layer)}/{int(head)}/headvis")

    def corpus_import(self, zipped: bytes) -> dict:
        """POST /api/corpus/import: a zipped HeadVis tree (its bytes) stored as a run; the run,
        a dict."""
        return json.loads(self._call("/api/corpus/import", bytes(zipped)).body)

    def image_attention(
        self, image: bytes | str | os.PathLike, model: str | None = None, query: int = 0
    ) -> dict:
        """POST /api/image/attention: an image (PNG, JPEG or WebP: its bytes or a file's path)
        through a vision transformer (the embedded DINOv2-small unless `model` names another),
        a dict: weights (layers, heads, T) float32, the rows of token `query` (0: the class
        token; the patch at row r, column c: len(prefix) + r * cols + c); rollout (T,);
        distance (layers, heads) in pixels; received (layers, T); norms (T,); artifacts; the
        image as the model saw it (image_png, base64) and the grid (rows, cols, patch)."""
        data = image if isinstance(image, bytes) else Path(image).read_bytes()
        params = {"query": int(query), **({"model": model} if model else {})}
        path = f"/api/image/attention?{urllib.parse.urlencode(params)}"
        answer = json.loads(self._call(path, data, kind=_image_type(data)).body)
        return _with_arrays(answer, "weights", "rollout", "distance", "received", "norms")

    def image_samples(self) -> list[dict]:
        """GET /api/image/samples: the bundled sample images, a list of dicts {name, title,
        credit, licence}."""
        return self.get_json("/api/image/samples")

    def image_sample(self, name: str) -> bytes:
        """GET /api/image/samples/{name}: a bundled sample image's file, its bytes (JPEG)."""
        return self._call(f"/api/image/samples/{urllib.parse.quote(name, safe='')}").body

    def corpus_projection(self, run: int, layer: int, head: int, **body) -> dict:
        """POST /api/corpus/{run_id}/heads/{layer}/{head}/projection: the head's queries, keys,
        values and outputs over the run's tokens in 2-D, a dict. body: tokens, method, seed."""
        path = f"/api/corpus/{int(run)}/heads/{int(layer)}/{int(head)}/projection"
        return self.post_json(path, _body(**body))

    def lab(self, name: str, **body) -> dict:
        """POST /api/lab/<name>, one of LAB_ROUTES (masks, scaling, scoring, tiling, linear,
        positions, cost, kv-cache, heads, cross, sparse, rope-head, padding, what-a-head-is,
        forward-pass), with `body` as its fields (/docs lists them): the server's answer, a
        dict of lists (no arrays)."""
        if name not in LAB_ROUTES:
            near = difflib.get_close_matches(name, LAB_ROUTES, n=1)
            hint = f"did you mean {near[0]!r}?" if near else f"one of {', '.join(LAB_ROUTES)}"
            raise ValueError(f"no lab route {name!r}; {hint}")
        return self.post_json(f"/api/lab/{name}", body)

    def lessons(self) -> list[dict]:
        """GET /api/lessons: the lessons /learn offers, a list of dicts {id, title, summary,
        steps, source}."""
        return self.get_json("/api/lessons")["lessons"]

    def lesson(self, lesson_id: str) -> dict:
        """GET /api/lessons/{lesson_id}: one lesson, step by step, a dict."""
        return self.get_json(f"/api/lessons/{urllib.parse.quote(lesson_id, safe='')}")

    def check_lesson(self, text: str) -> dict:
        """POST /api/lessons/check: a lesson written by hand (its JSON, as text), returned as
        the player will read it (a dict); AtlasError 422 names the first problem."""
        return self.post_json("/api/lessons/check", {"text": text})


def _quoted(model: str) -> str:
    """A model id as a URL path: its '/' kept (routes take org/name), anything else escaped."""
    return urllib.parse.quote(model, safe="/")


def _listed(matrix) -> list:
    """A matrix as JSON lists (numpy arrays included)."""
    return matrix.tolist() if isinstance(matrix, np.ndarray) else matrix
