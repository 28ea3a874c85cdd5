import logging

from fastapi import APIRouter, Request, Response
from starlette.responses import StreamingResponse

from app.api.responses import BODY_ROUTE, errors, ndjson_lines
from app.api.running import (
    ReservedStream,
    answer_from_pass,
    heavy,
    progress_stream,
    reserved_json,
    statistics_passes,
    stream_maps,
    until_disconnect,
    where_to_run,
)
from app.api.strict_json import StrictJSONRoute
from app.deps import PassesDep, SettingsDep
from atlas_engine.compute import iterate_on_compute, run_on_compute
from atlas_engine.schemas.ablation import AblationRequest, AblationResponse
from atlas_engine.schemas.aggregate import (
    AggregateRequest,
    AggregateResponse,
    SimilarityRequest,
    SimilarityResponse,
)
from atlas_engine.schemas.attention import (
    AttentionRequest,
    AttentionResponse,
    DetailRequest,
    DetailResponse,
    TextRequest,
)
from atlas_engine.schemas.compare import CompareRequest, CompareResponse
from atlas_engine.schemas.follow import FollowRequest, FollowResponse
from atlas_engine.schemas.forward import ForwardDone, ForwardFailed, ForwardProgress
from atlas_engine.schemas.generate import GeneratedToken, GenerateRequest, GenerationDone
from atlas_engine.schemas.heads import HeadsRequest, HeadsResponse
from atlas_engine.schemas.predictions import PredictionsRequest, PredictionsResponse
from atlas_engine.schemas.qkspace import QKSpaceRequest, QKSpaceResponse
from atlas_engine.schemas.search import SearchRequest, SearchResponse
from atlas_engine.schemas.seq2seq import DecoderRequest, DecoderResponse
from atlas_engine.schemas.tiles import TilesRequest, TilesResponse
from atlas_engine.serialize import BINARY_MEDIA_TYPE, STANDARD_MEDIA_TYPES
from atlas_engine.services.ablation import ablate
from atlas_engine.services.aggregate import aggregate_maps, similarity
from atlas_engine.services.attention import attention_detail, attention_maps
from atlas_engine.services.compare import compare
from atlas_engine.services.forward import checked_model, run_pass
from atlas_engine.services.generate import start_generation
from atlas_engine.services.heads import describe_heads, follow, search_heads
from atlas_engine.services.predictions import predictions
from atlas_engine.services.qkspace import query_key_space
from atlas_engine.services.seq2seq import decoder_attention
from atlas_engine.services.tiles import tiles
from attention_core.head_stats import DESCRIPTIONS

log = logging.getLogger("attention_atlas")
router = APIRouter(prefix="/api/attention", tags=["attention"], route_class=StrictJSONRoute)

ERRORS = errors(*BODY_ROUTE, 404, 503)
STATISTICS_LISTED = "; ".join(f"`{name}`, {meaning}" for name, meaning in DESCRIPTIONS.items())
MAPS_RESPONSES = {  # maps answers: JSON (the response model) or the binary format below
    **ERRORS,
    200: {
        "content": {
            media: {"schema": {"type": "string", "format": "binary"}}
            for media in (BINARY_MEDIA_TYPE, *STANDARD_MEDIA_TYPES.values())
        }
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
|  | `error_bound` and `decode`; `shape` is [layers, heads, side, side], side = |
|  | ceil(seq / `cell`) (seq when `cell` is 1) |
| 0–7 | zero padding so the data starts at a multiple of 8 |
| rest | the weights, C order `[layer][head][query][key]` |

float32: exact. float16: |decoded − exact| ≤ 2⁻¹² (weights lie in [0, 1]).
uint8: `w = q / 255`, |error| ≤ 1/510.

**Standard formats**, float32 and exact, for clients with no decoder of ours:
`safetensors` (`application/vnd.safetensors`) holds one tensor `attentions`
of that shape and the other JSON fields as a JSON string in the header's
`__metadata__["atlas"]` (read it with `safetensors.numpy.load` or the JavaScript readers);
`npy` (`application/x-npy`) is `numpy.load`'s format, the weights only.

Every answer is compressed with zstd, brotli or gzip when the request's `Accept-Encoding`
offers one (in that order of preference); see docs/performance.md for measured sizes and times.
A 512-token MiniLM layer (12 heads) is 3.1 MB as u8, 12.6 MB as f32, about 41 MB as JSON.

**Limits, checked from the request before any work**: `layers` and `heads` hold distinct
indices below the model's counts; a JSON answer holds at most 4,000,000 weights; a binary
answer is at most `ATLAS_MAX_ANSWER_BYTES` (128 MiB by default; the 422 says how many layers
fit). Answers are streamed as they are produced; binary answers carry Content-Length.
"""


@router.post(
    "",
    response_model=AttentionResponse,
    summary="Attention maps of a real model",
    description="Runs the model once (or answers from the cache) and returns the attention "
    "weights `attentions[layer][head][query][key]` for the requested layers and heads.\n"
    + BINARY_DOC,
    responses=MAPS_RESPONSES,
)
async def post_attention(
    body: AttentionRequest,
    passes: PassesDep,
    settings: SettingsDep,
    request: Request,
) -> Response:
    return await stream_maps(
        request,
        lambda stop: attention_maps(passes, body, settings.max_answer_bytes, stop),
        where_to_run(passes, body),
    )


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
async def post_detail(body: DetailRequest, passes: PassesDep, request: Request) -> Response:
    return reserved_json(await answer_from_pass(request, attention_detail, passes, body))


@router.post(
    "/heads",
    response_model=HeadsResponse,
    summary="What every head does: statistics and roles",
    description="For every layer and head on this text, each statistic (a mean over query "
    f"rows) of: {STATISTICS_LISTED}; and the roles these imply, each with the score that "
    "decided it. Computed from the cached forward pass. "
    "Induction and duplicate-token scores need a repeated token (null otherwise). Where the "
    "model's maps are replayed (`/api/models`: a known family in float32) the text may be as "
    "long as the model takes: the statistics are computed a block of query rows at a time from "
    "the replayed queries and keys, within the replay's bound of the model's own maps. That "
    "takes a while on a long text (seconds a layer at 8,192 tokens on a CPU): ask for `layers` "
    "one at a time to show each as it comes. Other models take up to `full_map_tokens`. "
    "`marked` token positions (a passage, a word found in the text) add the statistic "
    "`marked`: each head's share of attention on them from the rows that read them from "
    "elsewhere, in the same pass over the blocks, or over the `read_from` rows instead: from "
    "the last token of a question about a passage, retrieval heads give it most of their "
    "attention.",
    responses=ERRORS,
)
async def post_heads(body: HeadsRequest, passes: PassesDep, request: Request) -> HeadsResponse:
    pass_count = statistics_passes(passes, body)
    return await answer_from_pass(request, describe_heads, passes, body, pass_count)


@router.post(
    "/token",
    response_model=FollowResponse,
    summary="Follow one token through every layer and head",
    description="What the token attends to (as a query) and what every token gives it (as a "
    "key), in every layer and head at once, with the mean and the largest over each layer's "
    "heads. 'What does *it* attend to in each layer?' in one request.",
    responses=ERRORS,
)
async def post_token(body: FollowRequest, passes: PassesDep, request: Request) -> FollowResponse:
    return await answer_from_pass(request, follow, passes, body)


@router.post(
    "/predictions",
    response_model=PredictionsResponse,
    summary="The model's own top-k predictions beside its attention",
    description="For a causal decoder, the next-token top-k at every position (query row); for "
    "a BERT-family encoder with a masked-LM head, the top-k at every mask token of the text. "
    "Read from the same forward pass as the maps (cached). A checkpoint without an LM head "
    "(MiniLM, a sentence encoder) answers 422 saying so.",
    responses=ERRORS,
)
async def post_predictions(
    body: PredictionsRequest,
    passes: PassesDep,
    request: Request,
) -> PredictionsResponse:
    return await answer_from_pass(request, predictions, passes, body)


@router.post(
    "/ablate",
    response_model=AblationResponse,
    summary="Switch heads off and see what changes",
    description="Runs the model once more with the chosen heads' outputs set to zero (or to "
    "their mean over positions) where they enter the layer's output projection, and compares "
    "with the unablated (cached) run: each predicted position's top-k both ways, the KL "
    "divergence and the top token's logit change, how far every later head's rows moved, and "
    "one head's map both ways. BERT, GPT-2 and Llama-family models.",
    responses=ERRORS,
)
async def post_ablate(
    body: AblationRequest,
    passes: PassesDep,
    request: Request,
) -> Response:
    return reserved_json(
        await until_disconnect(
            request, lambda stop: ablate(passes, body, stop), heavy(passes, body)
        )
    )


@router.post(
    "/generate",
    summary="Let a decoder continue the text, token by token",
    description="Streams `application/x-ndjson`: one JSON line per new token as it is chosen "
    "(`event` 'token': index, token_id, token, probability, continuation so far), then one "
    "last line (`event` 'done': the whole `text`, `prompt_tokens`, `generated`, `stopped`, "
    "`exact`). Open `text` in any view: positions from `prompt_tokens` on are the generated "
    "ones, and when `exact` is true their maps are the generation's own attention (the same "
    "tokens, the same causal computation). Greedy, or sampled at a temperature (optionally "
    "from the top k) with a seed; the same request continues the same way. Stops early at "
    "the model's end-of-text token. Checked before any work: a causal model with an LM head, "
    "and prompt plus `max_new_tokens` within the model's max_tokens. Closing the connection "
    "stops the generation within one token.",
    response_class=StreamingResponse,
    responses={
        **ERRORS,
        200: ndjson_lines(
            "One JSON object per line: GeneratedToken lines, then GenerationDone",
            GeneratedToken,
            GenerationDone,
        ),
    },
)
async def post_generate(
    body: GenerateRequest, passes: PassesDep, request: Request
) -> ReservedStream:
    lines, reservation = await until_disconnect(
        request, lambda stop: start_generation(passes, body), heavy(passes, body)
    )
    return ReservedStream(iterate_on_compute(lines), "application/x-ndjson", reservation)


@router.post(
    "/decoder",
    response_model=DecoderResponse,
    summary="An encoder-decoder's decoder self-attention and cross-attention",
    description="For an encoder-decoder (T5 and the like; `encoder_decoder` in /api/models), "
    "whose other routes show its encoder: one decoder layer's self-attention as it reads the "
    "`target` teacher-forced (its start token, then the target's tokens but the last) and its "
    "cross-attention from each of those over the input's tokens. transformers' own "
    "weights from one run of the whole model. Both texts are held to the model's "
    "`full_map_tokens`, and the answer to 4,000,000 weights; any other model gets 422.",
    responses=ERRORS,
)
async def post_decoder(body: DecoderRequest, passes: PassesDep, request: Request) -> Response:
    return reserved_json(
        await until_disconnect(
            request,
            lambda stop: decoder_attention(passes, body, stop),
            heavy(passes, body, 2.0),  # the encoder and the decoder
        )
    )


@router.post(
    "/compare",
    response_model=CompareResponse,
    summary="Two heads side by side, and their difference",
    description="Side A is `model`, `text`, `layer`, `head`; side B (`other`) names its own "
    "layer and head and may name another text or another model. Three comparisons in one: two "
    "heads of one run, the same head on two inputs, two models on one text. Where the tokens "
    "line up (as many tokens, and for two models the same pieces) the answer adds b - a and "
    "each query row's total variation distance; otherwise `alignment` says why not. At most "
    "two forward passes, both cached.",
    responses=ERRORS,
)
async def post_compare(
    body: CompareRequest,
    passes: PassesDep,
    request: Request,
) -> Response:
    return reserved_json(await answer_from_pass(request, compare, passes, body))


@router.post(
    "/qkspace",
    response_model=QKSpaceResponse,
    summary="Query-key space: a head's queries and keys in one plane",
    description="The tokens' query and key vectors of one head (or of every head of the layer, "
    "for small multiples), replayed from the weights after RoPE where the model has it, moved "
    "as AttentionViz does in the two ways that leave every weight unchanged (queries times s "
    "and keys divided by s; keys translated onto the queries' centroid; s balances the mean "
    "norms), then projected together into 2-D by PCA (exact) or UMAP (optional package). "
    "Each query also lists the keys it attends to most, from the model's own output. BERT, "
    "GPT-2 and Llama-family models.",
    responses=ERRORS,
)
async def post_qkspace(
    body: QKSpaceRequest,
    passes: PassesDep,
    request: Request,
) -> QKSpaceResponse:
    return await answer_from_pass(request, query_key_space, passes, body)


@router.post(
    "/forward",
    summary="Run the forward pass over a long text, streaming its progress",
    description="Streams `application/x-ndjson`: a line as each layer starts (`event` "
    "'progress': `layer` done of `layers`), then one last line (`event` 'done': the tokens, "
    "`seq_len`, the model's shape, `cached`, `forward_ms`), or `event` 'error' if the pass "
    "could not finish (503: the server was busy). The pass is cached: windows of its maps "
    "(POST /api/attention/tiles) then cost no forward pass. A text is checked against the "
    "model's whole token limit (`max_tokens`, SmolLM2's 8,192) before the stream starts; "
    "above the size where one layer's maps would be large the pass runs PyTorch's fused "
    "attention, which never materialises them. Closing the connection stops the pass within "
    "one layer. BERT, GPT-2 and Llama-family models.",
    response_class=StreamingResponse,
    responses={
        **ERRORS,
        200: ndjson_lines(
            "One JSON object per line: ForwardProgress lines, then ForwardDone or ForwardFailed",
            ForwardProgress,
            ForwardDone,
            ForwardFailed,
        ),
    },
)
async def post_forward(body: TextRequest, passes: PassesDep, request: Request) -> StreamingResponse:
    cost = heavy(passes, body)  # it loads the model if it must
    loaded = await run_on_compute(checked_model, passes, body, **cost._asdict())
    return progress_stream(
        lambda stop, progress: run_pass(loaded, passes, body, stop, progress),
        where_to_run(passes, body),
    )


@router.post(
    "/tiles",
    response_model=TilesResponse,
    summary="A window of a layer's maps at a zoom level (deep zoom)",
    description="Rows `rows` and keys `cols` of one layer's maps for `heads`, either the "
    "weights themselves (`cell` 1) or each `cell` x `cell` block's maximum or mean. Computed "
    "from the layer's replayed queries and keys block by block: each row's softmax normaliser "
    "by the online softmax, then only the window's weights, so no tokens x tokens matrix is "
    "held for it. Within `error_bound` of transformers' own weights. At most 1,048,576 values "
    "an answer (checked first). BERT, GPT-2 and Llama-family models.",
    responses=ERRORS,
)
async def post_tiles(body: TilesRequest, passes: PassesDep, request: Request) -> Response:
    return reserved_json(await answer_from_pass(request, tiles, passes, body))


@router.post(
    "/search",
    response_model=SearchResponse,
    summary="Find heads: by a weight between two tokens, by role, or ranked by a statistic",
    description="`query` is one of: `{kind: 'pair', source, target, above}` (heads where token "
    "source gives token target more than `above`), `{kind: 'role', role}` (heads with that "
    "role), `{kind: 'rank', statistic, order}` (every head ranked by a statistic of "
    "/api/attention/heads). Each result names a layer and head to open. Texts as long as "
    "/api/attention/heads takes.",
    responses=ERRORS,
)
async def post_search(body: SearchRequest, passes: PassesDep, request: Request) -> SearchResponse:
    pass_count = statistics_passes(passes, body)  # ranks and roles read every layer
    return await answer_from_pass(request, search_heads, passes, body, pass_count)


@router.post(
    "/aggregate",
    response_model=AggregateResponse,
    summary="Heads summed up: each layer's head average, or attention rollout",
    description="One map per requested layer, from the cached forward pass. `average`: the "
    "mean of the layer's heads. `rollout` (Abnar & Zuidema, 2020): the heads averaged, mixed "
    "with the identity for the residual path (`residual`, 0.5 in the paper), rows "
    "renormalised, and multiplied through the layers up to this one, so row i of a layer's map "
    "says how much of each input token token i holds after that layer. Answers are framed as "
    "POST /api/attention's with one 'head' (`heads` is []); the same formats and limits "
    "apply.",
    responses=MAPS_RESPONSES,
)
async def post_aggregate(
    body: AggregateRequest,
    passes: PassesDep,
    settings: SettingsDep,
    request: Request,
) -> Response:
    return await stream_maps(
        request,
        lambda stop: aggregate_maps(passes, body, settings.max_answer_bytes, stop),
        where_to_run(passes, body),
    )


@router.post(
    "/similarity",
    response_model=SimilarityResponse,
    summary="How alike every two heads are on this text",
    description="A (layer, head) x (layer, head) matrix: 1 minus the Jensen-Shannon divergence "
    "(bits) between two heads' attention rows, averaged over query rows; with an order that "
    "puts alike heads side by side. Exact up to 64 tokens; above that, 64 evenly spaced query "
    "rows are compared, each summed into 64 contiguous key bins (`exact` says which).",
    responses=ERRORS,
)
async def post_similarity(
    body: SimilarityRequest,
    passes: PassesDep,
    request: Request,
) -> SimilarityResponse:
    return await answer_from_pass(request, similarity, passes, body)
