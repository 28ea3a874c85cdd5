"""The explorer's views inline in a notebook (Jupyter, JupyterLab, VS Code, Colab) via anywidget.

    from attention_atlas import show
    show(model, "The cat sat on the mat.")        # a transformers model object, id or folder
    show(attention, tokens)                       # what bertviz's head_view takes
    show(cross, tokens=source, query_tokens=target)  # encoder-decoder cross-attention

The widget runs the web app's own ES modules (static/js/views) on the maps sent with it; the
views that replay a head from the model's weights (query · key, step by step) ask the kernel,
which recomputes them with attention_core exactly as the server's detail API does.
"""

from __future__ import annotations

import os
import uuid
from contextlib import contextmanager

import anywidget
import numpy as np
import orjson
import torch
import traitlets
from pydantic import ValidationError

from atlas_engine.errors import AtlasError
from atlas_engine.inference.forward import ForwardResult
from atlas_engine.inference.replay import refused
from atlas_engine.models.families import architecture
from atlas_engine.models.loader import LoadedModel
from atlas_engine.models.registry import Family, ModelSpec, Source
from atlas_engine.schemas.attention import DetailRequest
from atlas_engine.schemas.circuit import CircuitRequest
from atlas_engine.schemas.qkspace import QKSpaceRequest
from atlas_engine.schemas.trace import TraceRequest
from atlas_engine.schemas.writes import AttributionRequest, LensRequest
from atlas_engine.serialize import json_with_float32
from atlas_engine.services.attention import detail_of
from atlas_engine.services.attribution import attribution_fields, plan_attribution
from atlas_engine.services.circuit import circuit_fields, plan_circuit
from atlas_engine.services.lens import lens_fields, plan_lens
from atlas_engine.services.qkspace import projection_methods, qkspace_of
from atlas_engine.services.score_trace import plan_trace, trace_fields
from attention_atlas.bundle import (
    MAPS_VIEWS,
    REPLAY_VIEWS,
    WRITES_VIEWS,
    panels_html,
    plotly_js,
    view_modules,
    widget_css,
    widget_esm,
)
from attention_atlas.run import MAX_TOKENS, AttentionRun, run_model

MAX_WIDGET_BYTES = 256 * 2**20  # the maps travel to the browser as one message
NO_REPLAY = (
    "Query · Key, Value-weighted, Q-K space and Step by step replay a head as the model ran "
    "it: they need a model given with its weights (show(model, text)), not bare maps, whose "
    "attention goes through transformers' attention interface."
)


class AttentionWidget(anywidget.AnyWidget):
    """One set of attention maps with the explorer's views. view, layer and head are live:
    set them from Python to move the widget, read them to see where the user is."""

    _esm = traitlets.Unicode(widget_esm()).tag(sync=True)
    _css = traitlets.Unicode(widget_css()).tag(sync=True)
    plotly_js = traitlets.Unicode(plotly_js()).tag(sync=True)
    panels = traitlets.Unicode().tag(sync=True)
    modules = traitlets.Dict().tag(sync=True)  # {view: its module, a data: URL}
    meta = traitlets.Dict().tag(sync=True)
    maps = traitlets.Bytes().tag(sync=True)  # float32 [layer][head][query][key]
    view = traitlets.Unicode("heatmap").tag(sync=True)
    layer = traitlets.Int(0).tag(sync=True)
    head = traitlets.Int(0).tag(sync=True)

    def __init__(
        self,
        attention,
        tokens: list[str],
        *,
        query_tokens: list[str] | None = None,
        model_name: str = "attention",
        num_kv_heads: int | None = None,
        run: AttentionRun | None = None,
        view: str = "heatmap",
        layer: int = 0,
        head: int = 0,
    ) -> None:
        maps = as_maps(attention)
        layers, heads, rows, _ = maps.shape
        check_tokens(maps.shape, tokens, query_tokens)
        replayable = run is not None and run.replayable and query_tokens is None
        views = MAPS_VIEWS if query_tokens is None else MAPS_VIEWS[:1]  # grid/lines: square
        views = views + (REPLAY_VIEWS if replayable else [])
        if replayable and run.predictor is not None:  # what reads the LM head
            views = views + (WRITES_VIEWS if run.predicts == "next_token" else WRITES_VIEWS[:1])
        if view not in dict(views):
            raise ValueError(f"view must be one of {[name for name, _ in views]}")
        if not (0 <= layer < layers and 0 <= head < heads):
            raise ValueError(f"layer and head must be below {layers} and {heads}")
        note = "" if replayable else NO_REPLAY
        if query_tokens is not None:
            note = "Cross-attention: rows are the decoder's tokens, columns the encoder's."
        super().__init__(
            panels=panels_html(
                views,
                f"{model_name} · {layers} layers × {heads} heads",
                note,
                prefix=f"atlas-{uuid.uuid4().hex[:8]}-",
            ),
            meta={
                "model": model_name,
                "tokens": list(tokens),
                "query_tokens": None if query_tokens is None else list(query_tokens),
                "num_layers": layers,
                "num_heads": heads,
                "num_kv_heads": num_kv_heads or heads,
                "causal": bool(rows > 1 and not np.triu(maps, 1).any()),
                "replayable": replayable,
                "replay_note": NO_REPLAY,
                "projections": projection_methods(),
            },
            modules={name: view_modules()[name] for name, _ in views},
            maps=maps.astype("<f4").tobytes(),
            view=view,
            layer=layer,
            head=head,
        )
        self._run = run if replayable else None
        self.on_msg(self._answer)

    def _answer(self, _widget, content: dict, _buffers) -> None:
        replay = REPLAYS.get(content.get("kind"))
        if replay is None:
            return
        try:
            answer = replay(self._run, content.get("body") or {})
            self.send({"id": content.get("id"), "answer": answer})
        except (ValueError, ValidationError, AtlasError) as err:
            self.send({"id": content.get("id"), "error": str(err).splitlines()[0]})


def as_maps(attention) -> np.ndarray:
    """(layers, heads, queries, keys) float32 from what users hold: a (L, H, Q, K) tensor or
    array, or transformers' tuple of per-layer (batch=1, H, Q, K) tensors (bertviz's input)."""
    if isinstance(attention, (tuple, list)):
        layers = [torch.as_tensor(layer) for layer in attention]
        if any(layer.dim() == 4 and layer.shape[0] != 1 for layer in layers):
            raise ValueError("pass one example: each layer's batch dimension must be 1")
        maps = torch.stack([layer[0] if layer.dim() == 4 else layer for layer in layers])
    else:
        maps = torch.as_tensor(attention)
    if maps.dim() != 4:
        raise ValueError(
            f"attention must be (layers, heads, queries, keys); got {tuple(maps.shape)}"
        )
    if maps.numel() * 4 > MAX_WIDGET_BYTES:
        raise ValueError(
            f"{maps.numel() * 4 / 2**20:,.0f} MB of maps is more than a notebook message should "
            f"carry ({MAX_WIDGET_BYTES // 2**20} MB): pass fewer layers, e.g. attention[:4]"
        )
    maps = maps.detach().float().cpu().numpy()
    if not np.isfinite(maps).all():
        raise ValueError("attention holds NaN or infinite values")
    return maps


def check_tokens(shape, tokens, query_tokens) -> None:
    """Returns nothing where the labels fit maps of `shape` (layers, heads, Q, K): K `tokens`,
    and Q `query_tokens` (or `tokens` where Q is K); raises ValueError saying which does not."""
    _, _, rows, cols = shape
    if len(tokens) != cols:
        raise ValueError(f"{len(tokens)} tokens for maps with {cols} keys")
    if len(query_tokens if query_tokens is not None else tokens) != rows:
        raise ValueError(f"maps have {rows} queries: pass query_tokens for cross-attention")


def _as_served(run: AttentionRun | None) -> tuple[LoadedModel, ForwardResult]:
    """`run` in the shapes the server's services read: (loaded model, forward result)."""
    if run is None:
        raise ValueError(NO_REPLAY)
    if run.model is None:  # its layers' calls were not kept: the reason is the run's
        raise refused(run.model_name, run.replay_refusal or NO_REPLAY)
    result = ForwardResult(
        tokens=run.tokens,
        raw_tokens=run.tokens,
        token_ids=run.token_ids,
        special=run.special_tokens,
        segments=None,
        words=list(range(len(run.tokens))),
        stored_maps=run.attentions,
        hidden_inputs=run.hidden_inputs,
        forward_seconds=0.0,
        calls=run.calls,
    )
    return _loaded(run), result


def _check_head(run: AttentionRun, layer: int, head: int | None) -> None:
    if not (0 <= layer < run.num_layers and (head is None or 0 <= head < run.num_heads)):
        raise ValueError("layer or head out of range")


def replay_detail(run: AttentionRun | None, body: dict) -> dict:
    """The server's detail answer for one head of `run`, from the views' request body: the
    dict POST /api/attention/detail answers (JSON types: matrices (T, T) or (T, head_dim) as
    lists of lists)."""
    loaded, result = _as_served(run)
    request = DetailRequest.model_validate({**body, "model": run.model_name, "text": "-"})
    _check_head(run, request.layer, request.head)
    with torch.inference_mode():
        return orjson.loads(json_with_float32(detail_of(loaded, result, request)))


def replay_qkspace(run: AttentionRun | None, body: dict) -> dict:
    """The server's query-key space answer for `run`, from the view's request body: the dict
    POST /api/attention/qkspace answers (JSON types: each head's queries and keys (T, 2) as
    lists)."""
    loaded, result = _as_served(run)
    request = QKSpaceRequest.model_validate({**body, "model": run.model_name, "text": "-"})
    _check_head(run, request.layer, request.head)
    return qkspace_of(loaded, result, request).model_dump(mode="json")


_served: dict[int, LoadedModel] = {}


def _loaded(run: AttentionRun) -> LoadedModel:
    """`run`'s model as the server holds one (atlas_engine.models.loader.LoadedModel), so the
    server's services answer the widget's views as they answer the explorer's; kept per run
    (the latest: a notebook's latest widget)."""
    found = _served.get(id(run))
    if found is None:
        found = LoadedModel(
            spec=ModelSpec(run.model_name, Source.FOLDER, "shown in a notebook"),
            family=run.family or Family.OTHER, tokenizer=run.tokenizer, model=run.model,
            arch=architecture(run.model.config), max_tokens=MAX_TOKENS, causal=run.causal,
            predictor=run.predictor, predicts=run.predicts, attention_layers=run.layers or [],
            replay_refusal=run.replay_refusal,
        )  # fmt: skip
        _served.clear()
        _served[id(run)] = found
    return found


def _writes_model(run: AttentionRun | None) -> LoadedModel:
    """`run`'s model for the lens and direct attribution, which run the text again through
    the taken-apart pass and read the model's language-model head."""
    if run is None or run.predictor is None or run.text is None:
        raise ValueError(
            "the logit lens and direct attribution read the model's language-model head: show "
            "a model loaded with one (show(model, text), a causal or masked LM)"
        )
    return _loaded(run)


def replay_lens(run: AttentionRun | None, body: dict) -> dict:
    """The server's lens answer for `run`'s text, from the view's request body: the dict POST
    /api/attention/lens answers (JSON types: token_probability and token_rank (rows,
    positions) as lists)."""
    loaded = _writes_model(run)
    request = LensRequest.model_validate({**body, "model": loaded.id, "text": run.text})
    fields = lens_fields(loaded, plan_lens(loaded, request), request.top_k)
    return orjson.loads(json_with_float32(fields))


def replay_attribution(run: AttentionRun | None, body: dict) -> dict:
    """The server's direct logit attribution for `run`'s text, from the view's request body:
    the dict POST /api/attention/attribution answers (JSON types: heads (layers, heads) as
    lists)."""
    loaded = _writes_model(run)
    request = AttributionRequest.model_validate({**body, "model": loaded.id, "text": run.text})
    fields = attribution_fields(loaded, request, plan_attribution(loaded, request))
    return orjson.loads(json_with_float32(fields))


@contextmanager
def _weights_frozen(run: AttentionRun):
    """The notebook's trainable weights kept out of a service's own gradients (the server's
    are frozen too) while it runs, and left as they were."""
    trainable = [p for p in run.model.parameters() if p.requires_grad]
    try:
        for p in trainable:
            p.requires_grad_(False)
        yield
    finally:
        for p in trainable:
            p.requires_grad_(True)


def _one_text(run: AttentionRun | None, view: str) -> LoadedModel:
    if run is None or run.text is None or run.text_pair is not None:
        raise ValueError(
            f"{view} runs the text again: show a model with one text (show(model, text))"
        )
    return _loaded(run)


def replay_trace(run: AttentionRun | None, body: dict) -> dict:
    """The server's score trace for `run`'s text, from the view's request body: the dict POST
    /api/attention/trace answers (it runs the text again, taken apart up to the layer)."""
    loaded = _one_text(run, "Trace a score")
    request = TraceRequest.model_validate({**body, "model": loaded.id, "text": run.text})
    with _weights_frozen(run):
        fields = trace_fields(loaded, request, plan_trace(loaded, request))
    return orjson.loads(json_with_float32(fields))


def replay_circuit(run: AttentionRun | None, body: dict) -> dict:
    """The server's circuit for `run`'s text, from the view's request body: the dict POST
    /api/attention/circuit answers (by text, by the weights, or by edge attribution patching
    against a corrupted text of the same length)."""
    loaded = _one_text(run, "Circuit")
    request = CircuitRequest.model_validate({**body, "model": loaded.id, "text": run.text})
    with _weights_frozen(run):
        fields = circuit_fields(loaded, request, plan_circuit(loaded, request))
    return orjson.loads(json_with_float32(fields))


REPLAYS = {
    "detail": replay_detail,
    "qkspace": replay_qkspace,
    "lens": replay_lens,
    "attribution": replay_attribution,
    "trace": replay_trace,
    "circuit": replay_circuit,
}


def show(
    source,
    text_or_tokens=None,
    text_pair: str | None = None,
    *,
    tokens: list[str] | None = None,
    query_tokens: list[str] | None = None,
    tokenizer=None,
    target: str | None = None,
    which: str = "encoder",
    **widget_options,
) -> AttentionWidget:
    """The explorer's views of `source`, inline:

    - show(model, text[, text_pair]): run a transformers model (object, id or folder);
    - show(run): an AttentionRun from run_model; for encoder-decoders which = "encoder",
      "decoder" or "cross";
    - show(attention, tokens): maps you already have (a (L, H, Q, K) tensor or transformers'
      tuple of layers), bertviz-style; query_tokens= for cross-attention.

    Returns the AttentionWidget, which a notebook draws as the cell's output; its view, layer
    and head are live in both directions.
    """
    if isinstance(source, (str, os.PathLike)) or hasattr(source, "config"):
        if not isinstance(text_or_tokens, str):
            raise ValueError("show(model, text): give the text to run the model on")
        source = run_model(source, text_or_tokens, text_pair, tokenizer=tokenizer, target=target)
    if isinstance(source, AttentionRun):
        return _show_run(source, which, widget_options)
    tokens = tokens if tokens is not None else text_or_tokens
    if tokens is None:
        raise ValueError("show(attention, tokens): the tokens label the maps' rows and columns")
    return AttentionWidget(source, list(tokens), query_tokens=query_tokens, **widget_options)


def _show_run(run: AttentionRun, which: str, options: dict) -> AttentionWidget:
    name = "/".join(run.model_name.rstrip("/").split("/")[-2:])  # org/name, or a folder's end
    if which == "encoder":
        return AttentionWidget(
            run.attentions, run.tokens, model_name=name, num_kv_heads=run.num_kv_heads,
            run=run, **options,
        )  # fmt: skip
    if run.target_tokens is None:
        raise ValueError(f"which={which!r} is for encoder-decoder models; this run has one stack")
    if which == "decoder":
        return AttentionWidget(
            run.decoder_attentions, run.target_tokens, model_name=f"{name} decoder", **options
        )
    if which == "cross":
        return AttentionWidget(
            run.cross_attentions, run.tokens, query_tokens=run.target_tokens,
            model_name=f"{name} cross-attention", **options,
        )  # fmt: skip
    raise ValueError("which must be 'encoder', 'decoder' or 'cross'")
