import asyncio
import threading
from collections.abc import Callable
from typing import TypeVar

from fastapi import APIRouter, Request, Response
from fastapi.concurrency import run_in_threadpool

from app.deps import CacheDep, ManagerDep
from app.schemas.attention import AttentionRequest, AttentionResponse, DetailRequest, DetailResponse
from app.schemas.common import ErrorDetail
from app.serialize import BINARY_MEDIA_TYPE
from app.services.attention import attention_detail, attention_maps

router = APIRouter(prefix="/api/attention", tags=["attention"])

ERRORS = {
    404: {
        "model": ErrorDetail,
        "description": "Unknown model; the message lists the available ones.",
    },
    422: {"model": ErrorDetail, "description": "Empty or too long text, layer/head out of range."},
    503: {
        "model": ErrorDetail,
        "description": "Model not available here; says why and how to fix it.",
    },
}

BINARY_DOC = """
**Binary formats** (`format` = `f32`, `f16` or `u8`) answer `application/vnd.attention-atlas.maps`.
All integers little-endian:

| bytes | field |
|---|---|
| 4 | magic `ATLS` |
| 1 | version = 1 |
| 1 | dtype: 1 = float16, 2 = uint8, 3 = float32 |
| 2 | reserved = 0 |
| 4 | `meta_len` |
| `meta_len` | UTF-8 JSON: the JSON fields except `attentions`, plus `shape`, `dtype`, |
|  | `error_bound` and `decode`; `shape` is [layers, heads, seq, seq] |
| 0–7 | zero padding so the data starts at a multiple of 8 |
| rest | the weights, C order `[layer][head][query][key]` |

float32: exact. float16: |decoded − exact| ≤ 2⁻¹² (weights lie in [0, 1]).
uint8: `w = q / 255`, |error| ≤ 1/510.
A 512-token MiniLM layer (12 heads) is 3.1 MB as u8, 12.6 MB as f32, about 41 MB as JSON.
"""


T = TypeVar("T")


async def until_disconnect(request: Request, work: Callable[[Callable[[], bool]], T]) -> T:
    """Run `work(should_stop)` in the thread pool; should_stop turns True if the client leaves."""
    gone = threading.Event()
    done = asyncio.Event()

    async def watch() -> None:
        while not done.is_set():
            if await request.is_disconnected():
                gone.set()
                return
            await asyncio.sleep(0.05)

    watcher = asyncio.create_task(watch())
    try:
        return await run_in_threadpool(work, gone.is_set)
    finally:
        done.set()
        watcher.cancel()


@router.post(
    "",
    response_model=AttentionResponse,
    summary="Attention maps of a real model",
    description="Runs the model once (or answers from the cache) and returns the attention "
    "weights `attentions[layer][head][query][key]` for the requested layers and heads.\n"
    + BINARY_DOC,
    responses={
        **ERRORS,
        200: {"content": {BINARY_MEDIA_TYPE: {"schema": {"type": "string", "format": "binary"}}}},
    },
)
async def post_attention(
    body: AttentionRequest, manager: ManagerDep, cache: CacheDep, request: Request
) -> Response:
    return await until_disconnect(request, lambda stop: attention_maps(manager, cache, body, stop))


@router.post(
    "/detail",
    response_model=DetailResponse,
    summary="One head in depth: q, k, scores and counterfactuals",
    description="Recomputes one layer and head from the model's own weights and the hidden "
    "states entering the layer (checked against transformers' output: see "
    "`replay_max_abs_diff`), and returns queries, keys, raw and scaled scores, the mask, the "
    "weights, and the same head at another scale or temperature.",
    responses=ERRORS,
)
async def post_detail(
    body: DetailRequest, manager: ManagerDep, cache: CacheDep, request: Request
) -> DetailResponse:
    return await until_disconnect(
        request, lambda stop: attention_detail(manager, cache, body, stop)
    )
