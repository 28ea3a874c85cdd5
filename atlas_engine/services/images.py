"""POST /api/image/attention: an image through a vision transformer (atlas_engine.vision), answered
as one query token's rows at every layer and head, with rollout, mean attention distance and the
artifact tokens (attention_core.vision).

Sized before work: the body's bytes are bounded by the body guard, its format and pixel count are
read from its header before any pixel is decoded (atlas_engine.vision.images), and the maps one
pass holds, layers x heads x T x T float32 with T the model's tokens for the prepared image, are
refused over MAX_MAP_BYTES before the forward pass. Image models are loaded once and kept, at most
MAX_IMAGE_MODELS of them (the oldest dropped), each refused before loading over the loader's
parameter bound."""

from __future__ import annotations

import base64
import threading
import time
from collections import OrderedDict
from pathlib import Path

from atlas_engine.errors import InvalidInput
from atlas_engine.schemas.images import ImageArtifact, ImageAttention, ImageSample
from atlas_engine.serialize import to_lists
from atlas_engine.vision.images import decode_image, image_size
from atlas_engine.vision.models import ImageModel, image_attention, load_image_model
from atlas_engine.vision.prepare import png_bytes, prepare
from atlas_engine.vision.samples import SAMPLES
from attention_core.vision import (
    PATCH_ROLES,
    artifact_tokens,
    attention_received,
    mean_attention_distance,
    patch_roles,
    rollout,
)

MAX_MAP_BYTES = 512 * 2**20
"""One pass's maps, (layers, heads, T, T) float32: a model and image past this are refused."""
MAX_IMAGE_MODELS = 2
ROLLOUT_RESIDUAL = 0.5

_models: OrderedDict[str, ImageModel] = OrderedDict()
_lock = threading.Lock()


def image_model(model_id: str, cache_dir: Path) -> ImageModel:
    """The loaded model `model_id`, loading it (once) where it is not held yet."""
    with _lock:
        if model_id in _models:
            _models.move_to_end(model_id)
            return _models[model_id]
        loaded = load_image_model(model_id, cache_dir)
        _models[model_id] = loaded
        while len(_models) > MAX_IMAGE_MODELS:
            _models.popitem(last=False)
        return loaded


def prefix_names(m: ImageModel) -> list[str]:
    """The prefix tokens by name, in order: the class token (none in SigLIP), DeiT's
    distillation token, then registers (ImageModel.prefix counts them all)."""
    kind = m.model.config.model_type
    names = [] if kind.startswith("siglip") else ["class"]
    if kind == "deit":
        names.append("distillation")
    names += [f"register {i + 1}" for i in range(m.prefix - len(names))]
    return names


def sample_fields(name: str) -> ImageSample:
    """What GET /api/image/samples lists of the bundled sample `name`."""
    sample = SAMPLES[name]
    return ImageSample(name=name, title=sample.title, credit=sample.credit, licence=sample.licence)


def answer(data: bytes, model_id: str, query: int, cache_dir: Path) -> ImageAttention:
    """The image in `data` (PNG, JPEG or WebP bytes) through `model_id`, as the rows of token
    `query`. Refusals (422) before work: a bad image (decode_image), a query past the tokens,
    maps over MAX_MAP_BYTES."""
    fmt, width, height = image_size(data)
    m = image_model(model_id, cache_dir)
    prepared = prepare(decode_image(data), m.processor)
    rows, cols = prepared.height // m.patch_size, prepared.width // m.patch_size
    tokens = m.prefix + rows * cols
    nbytes = m.layers * m.heads * tokens * tokens * 4
    if nbytes > MAX_MAP_BYTES:
        raise InvalidInput(
            f"{model_id} reads this image as {tokens} tokens: its maps would take {nbytes:,} "
            f"bytes, over the {MAX_MAP_BYTES:,} a request may; use a model of smaller input"
        )
    if query >= tokens:
        raise InvalidInput(
            f"query {query} is past this image's {tokens} tokens ({m.prefix} before the "
            f"{rows} x {cols} patches): use 0 to {tokens - 1}"
        )
    started = time.perf_counter()
    maps = image_attention(m, prepared.pixel_values)
    seconds = time.perf_counter() - started
    weights = maps.weights  # (L, H, T, T)
    received = attention_received(weights)  # (L, T): over heads and queries
    found = artifact_tokens(maps.hidden, received[-1], maps.prefix)
    norms = maps.hidden.float().norm(dim=-1)  # (T,)
    roles = patch_roles(weights, maps.prefix, maps.rows, maps.cols)  # (4, L, H)
    return ImageAttention(
        model=model_id,
        layers=m.layers,
        heads=m.heads,
        patch=m.patch_size,
        rows=maps.rows,
        cols=maps.cols,
        prefix=prefix_names(m),
        width=prepared.width,
        height=prepared.height,
        image_png=base64.b64encode(png_bytes(prepared.seen)).decode("ascii"),
        source={"format": fmt, "width": width, "height": height},
        query=query,
        weights=to_lists(weights[:, :, query]),
        rollout=to_lists(rollout(weights, ROLLOUT_RESIDUAL)[query]),
        rollout_residual=ROLLOUT_RESIDUAL,
        distance=to_lists(
            mean_attention_distance(weights, maps.prefix, maps.rows, maps.cols, m.patch_size)
        ),
        roles=dict(zip(PATCH_ROLES, to_lists(roles), strict=True)),
        received=to_lists(received),
        norms=to_lists(norms),
        artifacts=[
            ImageArtifact(
                token=t,
                row=(t - maps.prefix) // maps.cols,
                col=(t - maps.prefix) % maps.cols,
                norm=float(norms[t]),
                received=float(received[-1, t]),
            )
            for t in found.indices.tolist()
        ],
        seconds=seconds,
    )
