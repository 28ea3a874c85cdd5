from pathlib import Path

from fastapi import APIRouter
from starlette.responses import StreamingResponse

from app.api.responses import BODY_ROUTE, errors, ndjson_lines
from app.api.running import ProgressStream, run_with_room
from app.api.strict_json import StrictJSONRoute
from app.deps import PassesDep, SettingsDep
from atlas_engine.compute import Lane, run_on_compute
from atlas_engine.schemas.lab import MasksRequest, MasksResponse, ScalingRequest, ScalingResponse
from atlas_engine.schemas.lab_inside import (
    ForwardPassRequest,
    ForwardPassResponse,
    HeadAnatomyRequest,
    HeadAnatomyResponse,
)
from atlas_engine.schemas.lab_matrices import (
    CostRequest,
    CostResponse,
    KvCacheRequest,
    KvCacheResponse,
    LinearRequest,
    LinearResponse,
    PositionsRequest,
    PositionsResponse,
    ScoringRequest,
    ScoringResponse,
    TilingRequest,
    TilingResponse,
)
from atlas_engine.schemas.lab_models import (
    CrossRequest,
    CrossResponse,
    KvSharingRequest,
    KvSharingResponse,
    PaddingRequest,
    PaddingResponse,
    RopeHeadRequest,
    RopeHeadResponse,
    SparseRequest,
    SparseResponse,
)
from atlas_engine.schemas.training import (
    MAX_STREAM_BYTES,
    MAX_TRAIN_SECONDS,
    TrainEnded,
    TrainRequest,
    TrainSnapshot,
    TrainStarted,
)
from atlas_engine.services import lab_inside, lab_matrices, lab_models
from atlas_engine.services.lab import all_masks, scaling_demo
from atlas_engine.services.training import KEEP_TRAINED, MAX_TRAINING_JOBS, start_training

router = APIRouter(prefix="/api/lab", tags=["lab"], route_class=StrictJSONRoute)
# Small tensors of the request's own (bounded by its schema) take the quick lane; the routes that
# run a model take the heavy one (atlas_engine.compute).

ERRORS = errors(*BODY_ROUTE)
MODEL_ERRORS = errors(*BODY_ROUTE, 404, 503)


@router.post(
    "/masks", response_model=MasksResponse, responses=ERRORS, summary="Every mask on n tokens"
)
async def masks(body: MasksRequest) -> MasksResponse:
    """Causal, sliding window, dilated, global, random, BigBird and block-sparse masks from
    attention_core, each with its cost in computed (query, key) pairs against full attention."""
    return await run_on_compute(all_masks, body, lane=Lane.QUICK)


@router.post(
    "/scaling",
    response_model=ScalingResponse,
    responses=ERRORS,
    summary="Scaled vs unscaled softmax",
)
async def scaling(body: ScalingRequest) -> ScalingResponse:
    """Random q and k with unit-variance components: the softmax of q·k with and without the
    1/sqrt(d_k) scale, with entropy, max weight, effective tokens and the Jacobian norm, the
    empirical variance of q·k, and mean entropy against d_k."""
    return await run_on_compute(scaling_demo, body, lane=Lane.QUICK)


@router.post(
    "/scoring", response_model=ScoringResponse, responses=ERRORS, summary="Three score functions"
)
async def scoring(body: ScoringRequest) -> ScoringResponse:
    """Scaled dot-product, general (Luong, q^T W k) and additive (Bahdanau, v·tanh(W_q q + W_k
    k)) attention on the same q, k, v, with parameter and multiply-accumulate counts."""
    return await run_on_compute(lab_matrices.scoring, body, lane=Lane.QUICK)


@router.post(
    "/tiling", response_model=TilingResponse, responses=ERRORS, summary="FlashAttention's tiles"
)
async def tiling(body: TilingRequest) -> TilingResponse:
    """The online softmax one tile at a time (running max, running sum, the rescaling factor,
    the partial output) and the tiled output against exact attention."""
    return await run_on_compute(lab_matrices.tiling, body, lane=Lane.QUICK)


@router.post(
    "/linear",
    response_model=LinearResponse,
    responses=ERRORS,
    summary="Linear attention: a feature map and a d × d state instead of softmax",
)
async def linear(body: LinearRequest) -> LinearResponse:
    """phi = elu + 1 features, the d x d state, both multiplication orders, the implied weights
    beside softmax's, and cost curves against n."""
    return await run_on_compute(lab_matrices.linear, body, lane=Lane.QUICK)


@router.post(
    "/positions",
    response_model=PositionsResponse,
    responses=ERRORS,
    summary="Positions: the sinusoidal encoding and RoPE against offset",
)
async def positions(body: PositionsRequest) -> PositionsResponse:
    """The sinusoidal encoding with its shift matrix, and RoPE's q·k as a function of offset."""
    return await run_on_compute(lab_matrices.positions, body, lane=Lane.QUICK)


@router.post(
    "/cost", response_model=CostResponse, responses=ERRORS, summary="Pairs, MACs and memory"
)
async def attention_cost(body: CostRequest) -> CostResponse:
    """Pairs, multiply-accumulates and score memory for every mask kind, linear and tiled
    attention, at up to a million tokens, from exact formulas (no mask is built)."""
    return await run_on_compute(lab_matrices.attention_cost, body, lane=Lane.QUICK)


@router.post(
    "/kv-cache",
    response_model=KvCacheResponse,
    responses=ERRORS,
    summary="KV-cache bytes for MHA, GQA and MQA",
)
async def kv_cache(body: KvCacheRequest) -> KvCacheResponse:
    """KV-cache bytes per token and in all, for MHA, the configuration given and MQA."""
    return await run_on_compute(lab_matrices.kv_cache, body, lane=Lane.QUICK)


@router.post(
    "/what-a-head-is",
    response_model=HeadAnatomyResponse,
    responses=MODEL_ERRORS,
    summary="What a head is: one real layer, head by head",
)
async def what_a_head_is(body: HeadAnatomyRequest, passes: PassesDep) -> HeadAnatomyResponse:
    """A real layer taken apart from its captured call: its input X, each head's own Q, K, V
    and weights, the heads' outputs joined and mixed by W_O (found on a probe pass), and max |Δ|
    of every step against the model's own on that pass. Any model whose heads replay; texts
    of at most 64 tokens."""
    return await run_with_room(lab_inside.head_anatomy, passes, body)


@router.post(
    "/forward-pass",
    response_model=ForwardPassResponse,
    responses=MODEL_ERRORS,
    summary="One forward pass: tokens to the next token",
)
async def forward_pass(body: ForwardPassRequest, passes: PassesDep) -> ForwardPassResponse:
    """Tokens and their embeddings, the residual stream's size through every block with what
    attention and the MLP add, and (with an LM head) the next token's probabilities in float64
    and the likeliest next token at every position. Texts of at most 64 tokens."""
    return await run_with_room(lab_inside.forward_pass, passes, body)


@router.post(
    "/heads",
    response_model=KvSharingResponse,
    responses=MODEL_ERRORS,
    summary="Multi-head vs GQA vs MQA on a real layer",
)
async def kv_sharing(body: KvSharingRequest, passes: PassesDep) -> KvSharingResponse:
    """A real layer with its own K/V heads and with them mean-pooled into fewer (as GQA
    checkpoints are converted): which query head reads which K/V head, and how far maps move.
    Texts of at most 64 tokens."""
    return await run_with_room(lab_models.kv_sharing, passes, body)


@router.post(
    "/cross", response_model=CrossResponse, responses=MODEL_ERRORS, summary="Cross-attention"
)
async def cross(body: CrossRequest, passes: PassesDep) -> CrossResponse:
    """Queries from sentence A, keys and values from sentence B, through one encoder layer's
    own projections. Texts of at most 64 tokens; decoders, and layers that rotate by position,
    add a position bias or read a sliding window, are refused with the reason."""
    return await run_with_room(lab_models.cross_attention, passes, body)


@router.post(
    "/sparse",
    response_model=SparseResponse,
    responses=MODEL_ERRORS,
    summary="Sparse patterns on a real head",
)
async def sparse(body: SparseRequest, passes: PassesDep) -> SparseResponse:
    """A real head's q, k, v under seven sparse patterns: weights renormalised over the allowed
    keys, the attention mass each drops, the pairs scored and the change in output."""
    return await run_with_room(lab_models.sparse_weights, passes, body)


@router.post(
    "/rope-head",
    response_model=RopeHeadResponse,
    responses=MODEL_ERRORS,
    summary="A head with and without RoPE",
)
async def rope_head(body: RopeHeadRequest, passes: PassesDep) -> RopeHeadResponse:
    """A head replayed as it ran and with its rotary embedding switched off (its layer called
    again with a rotation by nothing). Any model whose heads replay and whose config has
    rope_parameters (`rotary` in /api/models)."""
    return await run_with_room(lab_models.rope_head, passes, body)


@router.post(
    "/padding",
    response_model=PaddingResponse,
    responses=MODEL_ERRORS,
    summary="Padding: a batch of sentences and its key-padding mask",
)
async def padding(body: PaddingRequest, passes: PassesDep) -> PaddingResponse:
    """Two to four sentences as one padded batch through an encoder: the key-padding mask, the
    zero weight on padded keys, and each sentence against a run of it alone."""
    return await run_with_room(lab_models.padding, passes, body)


@router.post(
    "/train",
    summary="Train a small attention-only transformer and stream its heads forming",
    description="Trains attention_core.training's model (the induction or reverse task) on one "
    "intra-op thread of a lane of its own, below the explorer's priority, and streams "
    "`application/x-ndjson`: a first line (`event` 'started': the config and its cost, "
    "estimated before any work), a line per snapshot (`event` 'snapshot', at step 0, every "
    "`every` steps and the last: losses in nats, (layers, heads) scores, (layers, heads, T, T) "
    "maps on the probe, floats as the shortest decimal of their float32), and a last line "
    "(`event` 'end', `reason` done, client_gone, stopped or error). When done the model is "
    "saved as a GPT-2 checkpoint and `model` names it: it opens in the explorer at once (the "
    f"newest {KEEP_TRAINED} are kept). Refused before any work with 422 (code 'input_rule'): "
    "d_model not divisible by heads, more than "
    f"{MAX_STREAM_BYTES} bytes of snapshots ((steps // every + 2) x snapshot_bytes), or a run "
    f"estimated over ATLAS_MAX_TRAIN_SECONDS ({MAX_TRAIN_SECONDS:.0f} s unless set); with 503 "
    "and Retry-After while "
    f"{MAX_TRAINING_JOBS} run(s) already go. Closing the connection stops the run at its next "
    "snapshot.",
    response_class=StreamingResponse,
    responses={
        **errors(*BODY_ROUTE),
        200: ndjson_lines(
            "One JSON object per line: TrainStarted, TrainSnapshot lines, then TrainEnded",
            TrainStarted,
            TrainSnapshot,
            TrainEnded,
        ),
    },
)
async def train(body: TrainRequest, settings: SettingsDep, passes: PassesDep) -> ProgressStream:
    lines, stop = start_training(
        body, Path(settings.trained_dir), passes.manager, settings.heavy_lane_nice,
        settings.max_train_seconds,
    )  # fmt: skip
    return ProgressStream(lines, stop)
