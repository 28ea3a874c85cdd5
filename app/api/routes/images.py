"""Images through a vision transformer (issue 55): the maps of an uploaded or bundled image, and
the bundled samples. The work is atlas_engine.services.images'; this module only reads the
request and names what it answers."""

from __future__ import annotations

from pathlib import Path as PathLib
from typing import Annotated

from fastapi import APIRouter, Path, Query, Request
from fastapi.responses import Response

from app.api.responses import errors
from app.api.running import LaneCost, run_with_room
from app.api.strict_json import StrictJSONRoute
from app.deps import SettingsDep
from atlas_engine.compute import Lane
from atlas_engine.errors import AtlasError, NotFound
from atlas_engine.schemas.images import MAX_QUERY, ImageAttention, ImageSample
from atlas_engine.services import images
from atlas_engine.vision.images import MAX_IMAGE_BYTES, MAX_IMAGE_PIXELS
from atlas_engine.vision.models import IMAGE_MODEL_ID
from atlas_engine.vision.samples import SAMPLES, sample_bytes

router = APIRouter(prefix="/api/image", tags=["images"], route_class=StrictJSONRoute)

IMAGE_TYPES = ("image/png", "image/jpeg", "image/webp")
PASS_SECONDS = 1.0  # the heavy lane's order: one ViT-S pass at 224 px, with its maps
MODEL_ID = r"^[A-Za-z0-9][A-Za-z0-9._-]*(/[A-Za-z0-9][A-Za-z0-9._-]*)?$"


class NotAnImage(AtlasError):
    status = 415
    code = "unsupported_media_type"


@router.post(
    "/attention",
    response_model=ImageAttention,
    summary="An image's attention in a vision transformer",
    description="The image in the body (PNG, JPEG or WebP, sent as it is with its Content-Type; "
    f"at most {MAX_IMAGE_BYTES:,} bytes and {MAX_IMAGE_PIXELS:,} pixels, both read from the "
    "header before any pixel is decoded; EXIF orientation applied; nothing kept) is prepared as "
    "the model's own image processor prepares it and run once. The answer holds the query "
    "token's attention over every token at every layer and head, the image as the model saw it, "
    "attention rollout, each head's mean attention distance, the attention each token receives "
    "and the high-norm artifact patches.",
    responses=errors(
        400, 404, 408, 413, 415, 422, 429, 503,
        e404="No such image model here: not the embedded one, and not a ViT-family checkpoint "
        "in the local Hugging Face cache or a folder.",
        e413=f"The image is larger than {MAX_IMAGE_BYTES:,} bytes.",
        e415="The body was not sent as image/png, image/jpeg or image/webp.",
        e422="An image that cannot be used: not PNG, JPEG or WebP by its header, truncated, "
        "too many pixels, animated, CMYK or 16-bit; or a query past the image's tokens, or "
        "maps too large for one request. The detail says which.",
    ),
    openapi_extra={
        "requestBody": {
            "required": True,
            "description": "The image file's bytes.",
            "content": {kind: {"schema": {"type": "string", "format": "binary"}}
                        for kind in IMAGE_TYPES},
        }
    },
)  # fmt: skip
async def image_attention(
    request: Request,
    settings: SettingsDep,
    model: Annotated[str, Query(max_length=200, pattern=MODEL_ID)] = IMAGE_MODEL_ID,
    query: Annotated[
        int,
        Query(ge=0, le=MAX_QUERY, description="The query token: 0 is the class token; the "
              "patch at row r, column c is prefix + r x cols + c"),
    ] = 0,
) -> ImageAttention:  # fmt: skip
    kind = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if kind not in IMAGE_TYPES:
        raise NotAnImage(f"send the image with Content-Type {', '.join(IMAGE_TYPES)}; got {kind!r}")
    body = await request.body()  # the body guard has bounded it (MAX_IMAGE_BYTES)
    cost = LaneCost(Lane.HEAVY, seconds=PASS_SECONDS)
    return await run_with_room(
        images.answer, body, model, query, PathLib(settings.cache_dir), cost=cost
    )


@router.get("/samples", response_model=list[ImageSample], summary="The bundled sample images")
async def samples() -> list[ImageSample]:
    return [images.sample_fields(name) for name in SAMPLES]


@router.get(
    "/samples/{name}",
    summary="A bundled sample image's file",
    response_class=Response,
    responses={
        200: {"content": {kind: {"schema": {"type": "string", "format": "binary"}}
                          for kind in IMAGE_TYPES}},
        **errors(404, 422, e422="A name longer than 64 characters."),
    },
)  # fmt: skip
async def sample_file(name: Annotated[str, Path(max_length=64)]) -> Response:
    if name not in SAMPLES:
        raise NotFound(f"no sample image {name!r}; there are {', '.join(SAMPLES)}")
    kind = {".jpg": "image/jpeg", ".png": "image/png", ".webp": "image/webp"}[
        SAMPLES[name].path.suffix
    ]
    return Response(
        sample_bytes(name), media_type=kind, headers={"Cache-Control": "public, max-age=86400"}
    )
