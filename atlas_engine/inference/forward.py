"""One forward pass over a text: the hidden states entering each attention block, and the maps
themselves only where they cannot be replayed from those."""

from __future__ import annotations

import hashlib
import json
import logging
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import torch
from torch import Tensor, nn

from atlas_engine import compute, timing
from atlas_engine.errors import InvalidInput, RequestCancelled
from atlas_engine.inference.encoding import encode
from atlas_engine.inference.predictions import top_predictions
from atlas_engine.inference.replay import replayed_maps
from atlas_engine.inference.tokens import display_tokens
from atlas_engine.models import capture
from atlas_engine.models.families import Architecture
from atlas_engine.models.lm_head import MAX_TOP_K
from atlas_engine.models.loader import LoadedModel
from atlas_engine.models.placement import model_device
from attention_core.head_stats import STATISTICS

log = logging.getLogger("attention_atlas")


EAGER_LAYER_BYTES = 64 * 2**20
"""A forward pass runs with eager attention (the model's own maps, computed and dropped layer by
layer) while one layer's maps fit in this; above it, with PyTorch's fused kernel, which never
materialises them (SmolLM2: eager up to 1,365 tokens; one eager layer at 8,192 is 2.4 GB)."""

Replay = Callable[["list[capture.LayerCall] | None", Tensor, int, "list[int] | None"], Tensor]
"""(calls, hidden_inputs, layer, heads or None for all) -> that layer's maps (heads, seq, seq)."""


@dataclass(frozen=True)
class ForwardResult:
    """Everything later requests need from one forward pass.

    A model whose heads replay exactly (a known family in float32) keeps only the hidden states
    entering each attention block, and its maps are replayed from them a layer at a time when
    asked for: 35 MB at 512 SmolLM2 tokens instead of 283 MB of maps. Any other model keeps the
    maps it returned (`stored_maps`).
    """

    tokens: list[str]  # display labels
    raw_tokens: list[str]  # vocabulary pieces
    token_ids: list[int]
    special: list[bool]
    segments: list[int] | None  # 0/1 per token for sentence pairs, else None
    words: list[int]  # word number of each token (pieces of one word share it); -1 for specials
    stored_maps: Tensor | None  # (layers, heads, seq, seq) float32 on the host, exactly the
    # model's; None where `replay` computes them
    hidden_inputs: Tensor  # (layers, seq, d_model), float32 on the host: each block's input;
    # (0, seq, 0) for a model of Family.OTHER, which has no replay to use them
    forward_seconds: float
    last_hidden: Tensor | None = None  # (seq, d_model) float32 on the host: what the LM head
    # reads; kept only for a model with a head, so predictions cost nothing until asked for
    calls: list[capture.LayerCall] | None = field(default=None, compare=False, repr=False)
    # each layer's attention call, to replay it (atlas_engine.models.capture): None where maps are stored
    replay: Replay | None = field(default=None, compare=False, repr=False)
    memo_bytes: int = 0  # what the memos below may grow to, counted in nbytes from the start
    # (so a cache's count of a pass never changes): the top-k table and the head statistics
    _top: dict = field(default_factory=dict, compare=False, repr=False)  # memo of top_k()
    statistics: dict = field(default_factory=dict, compare=False, repr=False)  # memo: layer ->
    # that layer's head statistics {name: (heads,)}, filled by atlas_engine.services.head_statistics

    @property
    def nbytes(self) -> int:
        maps = 0 if self.stored_maps is None else self.stored_maps.nbytes
        last = 0 if self.last_hidden is None else self.last_hidden.nbytes
        return maps + self.hidden_inputs.nbytes + last + self.memo_bytes + self.call_bytes

    @property
    def call_bytes(self) -> int:
        """Bytes the layer calls' own tensors hold (RoPE's cos and sin, T5's position bias),
        each shared tensor once."""
        seen = {id(t): t.nbytes for call in self.calls or () for t in call.tensors()}
        return sum(seen.values())

    @property
    def num_layers(self) -> int:
        held = self.stored_maps if self.stored_maps is not None else self.hidden_inputs
        return held.shape[0]

    def layer_maps(self, layer: int, heads: list[int] | None = None) -> Tensor:
        """(heads, seq, seq) float32 on the host: the layer's maps for these heads (all by
        default), a view of the stored maps or a new replay."""
        if self.stored_maps is not None:
            maps = self.stored_maps[layer]
            return maps if heads is None else maps[heads]
        return self.replay(self.calls, self.hidden_inputs, layer, heads)

    def head_map(self, layer: int, head: int) -> Tensor:
        """(seq, seq): one head's map."""
        return self.layer_maps(layer, [head])[0]

    def each_layer(self) -> Iterator[Tensor]:
        """Every layer's maps (heads, seq, seq) in order, one at a time."""
        return (self.layer_maps(layer) for layer in range(self.num_layers))

    def all_maps(self) -> Tensor:
        """(layers, heads, seq, seq): every map, for analyses that read them all (requests for
        them are held to loader.FULL_MAPS_MAX_TOKENS)."""
        if self.stored_maps is not None:
            return self.stored_maps
        first = self.layer_maps(0)
        out = first.new_empty(self.num_layers, *first.shape)
        out[0] = first
        for layer in range(1, self.num_layers):
            out[layer] = self.layer_maps(layer)
        return out

    def top_k(self, predictor: nn.Module) -> tuple[Tensor, Tensor]:
        """(ids, probabilities), each (seq, MAX_TOP_K), of the LM head at every position,
        computed on the first call (on the head's device) and kept."""
        if not self._top:
            device = model_device(predictor)
            ids, probs = top_predictions(predictor, self.last_hidden.to(device))
            self._top.update(ids=ids, probs=probs)
        return self._top["ids"], self._top["probs"]

    @staticmethod
    def memo_bytes_for(arch: Architecture, seq_len: int) -> int:
        """The most the memos of a pass hold: its top-k table and every head's statistics."""
        return 12 * seq_len * MAX_TOP_K + 4 * arch.num_layers * arch.num_heads * len(STATISTICS)

    @staticmethod
    def nbytes_for(arch: Architecture, seq_len: int, replayed: bool) -> int:
        """What a forward pass over seq_len tokens will hold, known before it runs."""
        maps = 0 if replayed else arch.num_layers * arch.num_heads * seq_len * seq_len
        hidden = arch.num_layers * seq_len * arch.d_model
        last = seq_len * arch.d_model  # an upper bound: only models with an LM head keep it
        calls = 0  # the layer calls' tensors: cos and sin for two kinds of layer, positions as
        # int64, and a position bias (heads, T, T) where the model adds one
        if replayed:
            bias = arch.num_heads * seq_len * seq_len if arch.position_bias else 0
            calls = 4 * seq_len * arch.head_dim + 4 * seq_len + bias
        return 4 * (maps + hidden + last + calls) + ForwardResult.memo_bytes_for(arch, seq_len)

    @staticmethod
    def seconds_for(arch: Architecture, seq_len: int) -> float:
        """A rough estimate of a forward pass's seconds, to order work (atlas_engine.compute), not to
        promise it: 2 flops a weight a token for about 12 d² weights a layer, plus 4 T d a
        token a layer for the scores and the weighted sum, at NOMINAL_FLOPS."""
        per_layer = 2 * 12 * arch.d_model**2 * seq_len + 4 * seq_len**2 * arch.d_model
        return arch.num_layers * per_layer / NOMINAL_FLOPS

    @property
    def seq_len(self) -> int:
        return len(self.token_ids)


NOMINAL_FLOPS = 1e11
"""Floating-point operations a second that ForwardResult.seconds_for assumes: MiniLM and SmolLM2
both ran at about this on 2 cores (128 tokens: 20 and 200 ms)."""


def tokenize(
    loaded: LoadedModel, text: str, text_pair: str | None, limit: int | None = None
) -> tuple[dict[str, Tensor], list[int]]:
    """(model inputs, word number of each token), refusing text over `limit` tokens (the
    model's max_tokens by default) instead of silently cutting it. Tokens of one word share a
    number; special tokens have -1."""
    if text_pair is not None and loaded.causal:
        raise InvalidInput(
            f"text_pair (sentence pairs) is for BERT-family encoders; '{loaded.id}' is a causal "
            "decoder. Put both sentences in 'text' instead."
        )
    with timing.timed("tokenize"):
        encoding, words = encode(loaded.tokenizer, text, text_pair)
    check_token_count(loaded, encoding["input_ids"].shape[1], limit)
    accepted = loaded.forward_inputs
    return {k: v for k, v in encoding.items() if k in accepted}, words


def check_token_count(loaded: LoadedModel, n: int, limit: int | None) -> None:
    """Refuse a text of n tokens: none, over the model's max_tokens, or over `limit`."""
    if n == 0:
        raise InvalidInput("the text produced no tokens; send some words")
    if n > loaded.max_tokens:
        raise InvalidInput(
            f"the text is {n} tokens long; '{loaded.id}' accepts at most {loaded.max_tokens} "
            "tokens here. Shorten the text."
        )
    if limit is not None and n > limit:
        raise InvalidInput(
            f"the text is {n} tokens long; this route reads every map of a text and takes at "
            f"most {limit} tokens. Longer texts (up to {loaded.max_tokens} for '{loaded.id}') "
            "are read a window at a time (POST /api/attention/tiles, the Deep zoom page) or a "
            "layer at a time (POST /api/attention)."
        )


COUNT_MEMO_ENTRIES = 1024
ENCODINGS_KEPT = 8
_counts: OrderedDict[tuple[str, bytes], int] = OrderedDict()  # (model, text digest) -> tokens
_encodings: OrderedDict[tuple[str, str, str | None], tuple[dict[str, Tensor], list[int]]] = (
    OrderedDict()
)  # (model, text, text_pair) -> encoding: a str keeps its hash, so a lookup needs no digest
_counts_lock = threading.Lock()


def count_tokens(
    loaded: LoadedModel, text: str, text_pair: str | None, limit: int | None = None
) -> int:
    """Tokens the text will have (the same checks as a forward pass, without running one).
    Counts are remembered by a digest of the text (the last COUNT_MEMO_ENTRIES, 32 bytes of
    key each), so a request for a text already seen is sized without tokenising it again; the
    last ENCODINGS_KEPT texts tokenised here keep their encoding for the forward pass that
    usually follows (tokenize_once)."""
    digest = hashlib.sha256(
        json.dumps([text, text_pair], ensure_ascii=False).encode("utf-8", "surrogatepass")
    ).digest()
    key = (loaded.id, digest)
    with _counts_lock:
        n = _counts.get(key)
        if n is not None:
            _counts.move_to_end(key)
    if n is None:
        encoded = tokenize(loaded, text, text_pair, None)
        n = int(encoded[0]["input_ids"].shape[1])
        with _counts_lock:
            _counts[key] = n
            while len(_counts) > COUNT_MEMO_ENTRIES:
                _counts.popitem(last=False)
            _encodings[(loaded.id, text, text_pair)] = encoded
            while len(_encodings) > ENCODINGS_KEPT:
                _encodings.popitem(last=False)
    check_token_count(loaded, n, limit)
    return n


def tokenize_once(
    loaded: LoadedModel, text: str, text_pair: str | None
) -> tuple[dict[str, Tensor], list[int]]:
    """tokenize(), or the encoding count_tokens just made of this text (taken, not shared)."""
    with _counts_lock:
        encoded = _encodings.pop((loaded.id, text, text_pair), None)
    return encoded if encoded is not None else tokenize(loaded, text, text_pair)


Progress = Callable[[int, int], None]
"""progress(layers done, layers in all), called as the forward pass enters each layer."""


class _PassEnded(Exception):
    """Raised from the last attention block's hook when nothing after it is wanted."""


MapsSink = Callable[[int, Tensor], None]
"""sink(layer, maps (heads, seq, seq) float32 on the host): a layer's maps as the model computed
them, offered as a pass with eager attention leaves each layer (see run_forward's keep_maps)."""


def pass_kernel(loaded: LoadedModel, seq_len: int) -> str:
    """The attention a pass over seq_len tokens runs: "eager" (the model's maps computed and
    dropped layer by layer) while one layer's maps fit in EAGER_LAYER_BYTES or are kept, else
    "sdpa" (PyTorch's fused kernel, which never materialises them)."""
    one_layer = 4 * loaded.arch.num_heads * seq_len * seq_len
    return "sdpa" if loaded.maps_replayed and one_layer > EAGER_LAYER_BYTES else "eager"


class _PassRecorder(capture.Recorder):
    """A pass's view of the capture function: the fused kernel where no maps are wanted, each
    layer's maps offered to `offer` as eager attention computes them, and the pass ended after
    layer `last` where nothing later is wanted."""

    def __init__(self, layers: list[nn.Module], fused: bool, offer: MapsSink | None, last):
        super().__init__()
        self.index = {id(module): i for i, module in enumerate(layers)}
        self.fused = fused
        self.offer = offer
        self.last = last

    def on_call(self, module, q, k, v, mask, kw):
        out, weights = super().on_call(module, q, k, v, mask, kw)
        index = self.index.get(id(module))
        if index is not None and self.offer is not None and weights is not None:
            self.offer(index, weights[0].detach().to("cpu", torch.float32))  # (H, T, T)
            if index == self.last:
                raise _PassEnded
        return out, weights


def run_forward(
    loaded: LoadedModel,
    text: str,
    text_pair: str | None = None,
    should_stop: Callable[[], bool] | None = None,
    progress: Progress | None = None,
    keep_maps: MapsSink | None = None,
) -> ForwardResult:
    """Run the model once, capturing each attention block's input; keep the model's maps only
    where they are not replayed on demand (maps_replayed).

    should_stop is polled before every layer; when it returns True the pass is abandoned
    (RequestCancelled), so a client that hung up stops costing CPU within one layer.
    keep_maps: where maps are replayed and the pass runs eager attention (which computes every
    layer's maps anyway), each layer's maps are handed to it as the layer finishes, so a caller
    can keep the ones it wants (the forward cache's memo) instead of replaying them later.

    A model without an LM head whose maps are replayed needs nothing the pass computes after
    its last attention block (ends_after_attention): the pass stops there, skipping the last
    layer's output projection, MLP and any pooler (12 % of MiniLM's pass). With eager attention
    and keep_maps it stops inside that block once its maps are offered; else before it, and its
    maps are replayed when asked for.
    """
    inputs, words = tokenize_once(loaded, text, text_pair)
    seq = int(inputs["input_ids"].shape[1])
    device = model_device(loaded.model)
    replayed = loaded.maps_replayed
    # Each layer's call is recorded only where the capture path replays it.
    modules = loaded.attention_layers if loaded.replayable else []
    captured: list[Tensor | None] = [None] * len(modules)
    calls: list[capture.LayerCall | None] = [None] * len(modules)

    kernel = pass_kernel(loaded, seq)
    offers = keep_maps is not None and replayed and kernel == "eager"
    last = len(modules) - 1 if ends_after_attention(loaded) else None
    recorder = _PassRecorder(modules, kernel == "sdpa", keep_maps if offers else None, last)

    depth = compute.depth()  # a pass run inside this one (compute.run_beside) is not this one

    def record(index: int):
        def hook(module, args, kwargs):
            if compute.depth() != depth:
                return
            if should_stop is not None and should_stop():
                log.info("client gone: stopped %s's forward pass at layer %d", loaded.id, index)
                raise RequestCancelled(
                    "the client closed the request; the forward pass was stopped"
                )
            if compute.shutting_down():
                raise compute.ShuttingDown("the server is shutting down; the pass was stopped")
            if progress is not None:
                progress(index, len(modules))
            compute.run_beside()  # a short job waiting goes between two layers
            hidden, calls[index] = capture.record_call(recorder, module, args, kwargs)
            captured[index] = hidden.detach().to("cpu", torch.float32)
            if index == last and not offers:
                raise _PassEnded

        return hook

    with loaded.lock:  # one pass at a time per model, but one run inside it (compute.run_beside)
        handles = [
            m.register_forward_pre_hook(record(i), with_kwargs=True) for i, m in enumerate(modules)
        ]
        try:
            clock = compute.OwnClock()
            with torch.inference_mode(), capture.recording(recorder):
                try:
                    output = loaded.model(
                        **{k: v.to(device) for k, v in inputs.items()},
                        output_attentions=not replayed,
                    )
                except _PassEnded:
                    output = None  # every block's input is captured: nothing else is wanted
            seconds = clock.own()  # less what jobs run inside it took (compute.run_beside)
            timing.add("forward", seconds)
        finally:
            for handle in handles:
                handle.remove()
    if any(t is None for t in captured) or (not replayed and output.attentions is None):
        raise RuntimeError(
            f"'{loaded.id}' returned no attentions: it must run with eager attention"
        )
    layers = None if replayed else list(output.attentions)
    last_hidden = None
    if loaded.predictor is not None:
        last_hidden = output.last_hidden_state[0].to("cpu", torch.float32)  # (T, D)
    del output  # only `layers` holds the model's maps now, so they can be freed one by one
    stored = None if layers is None else stack_to_host(layers)  # (L, H, T, T)
    if progress is not None:
        progress(len(modules), len(modules))
    ids = inputs["input_ids"][0].tolist()
    labels, raw, special = display_tokens(loaded.tokenizer, ids)
    segments = None
    if text_pair is not None:
        type_ids = inputs.get("token_type_ids")
        if type_ids is not None:
            segments = type_ids[0].tolist()
        else:  # models without segment embeddings (RoBERTa, DistilBERT): split at the separator
            segments = _segments_from_separators(ids, loaded.tokenizer.sep_token_id)
    return ForwardResult(
        tokens=labels,
        raw_tokens=raw,
        token_ids=ids,
        special=special,
        segments=segments,
        words=words,
        stored_maps=stored,
        hidden_inputs=stack_to_host(captured) if captured else torch.empty(0, len(ids), 0),
        forward_seconds=seconds,
        last_hidden=last_hidden,
        calls=calls if modules else None,  # half precision too: its views replay
        replay=replayed_maps if replayed else None,
        memo_bytes=ForwardResult.memo_bytes_for(loaded.arch, len(ids)),
    )


WARM_UP_TEXT = "Attention is all you need."


def warm_up(loaded: LoadedModel) -> None:
    """One short pass as a request runs it, thrown away: the first pass of a model on a thread
    pays for first uses (kernels' buffers, the thread's OpenMP team) that a user's first
    request should not."""
    run_forward(loaded, WARM_UP_TEXT, keep_maps=lambda _layer, _maps: None)


def ends_after_attention(loaded: LoadedModel) -> bool:
    """Whether a pass over this model may stop at its last attention block: its maps are
    replayed from the blocks' inputs and it has no LM head wanting the last hidden state."""
    return loaded.maps_replayed and loaded.predictor is None


def stack_to_host(layers: list[Tensor]) -> Tensor:
    """[(1, *shape)] * L on any device, any float dtype -> (L, *shape) float32 on the host
    (exact: half-precision values are float32 values), letting go of each layer once copied,
    so the pass never holds two full copies of its maps (torch.stack would)."""
    first = layers[0]
    out = torch.empty((len(layers), *first.shape[1:]), dtype=torch.float32)
    for i in range(len(layers)):
        out[i] = layers[i][0]
        layers[i] = None  # the model's own tensor is freed here, not after the loop
    return out


def _segments_from_separators(ids: list[int], sep_id: int | None) -> list[int]:
    """0 up to and including the first separator (run), 1 after it."""
    segments, current, seen_sep = [], 0, False
    for token_id in ids:
        if token_id == sep_id:
            seen_sep = True
        elif seen_sep:
            current = 1
        segments.append(current)
    return segments
