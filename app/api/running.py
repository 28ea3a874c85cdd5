"""How a request's work runs: on which compute lane (atlas_engine.compute) and in what order, stopped
when its client leaves, and its answer streamed piece by piece with its reservation released at
the end."""

import asyncio
import itertools
import logging
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterator
from concurrent.futures import Future
from typing import NamedTuple, TypeVar

from fastapi import Request
from pydantic import BaseModel
from starlette.responses import Response, StreamingResponse
from starlette.types import Receive, Scope, Send

from atlas_engine import compute
from atlas_engine.compute import Lane, iterate_on_compute, run_on_compute
from atlas_engine.errors import AtlasError
from atlas_engine.inference.forward import ForwardResult
from atlas_engine.inference.inflight import NoRoomYet, Reservation
from atlas_engine.inference.tokens import estimated_tokens
from atlas_engine.schemas.attention import TextRequest
from atlas_engine.schemas.forward import ForwardFailed, ForwardProgress
from atlas_engine.serialize import MapsAnswer
from atlas_engine.services.passes import Passes

log = logging.getLogger("attention_atlas")

T = TypeVar("T")


class LaneCost(NamedTuple):
    """Where a request's work runs and what the heavy lane needs to order it."""

    lane: Lane
    seconds: float = 0.0  # estimated: the heavy lane's order
    model: str | None = (
        None  # the one model it runs, where known (atlas_engine.compute's run_beside)
    )
    counted: float | None = None  # its seconds against the queue's bound, where not `seconds`
    text: tuple | None = None  # (model, text, pair) whose pass it reads: never run inside that pass


HEAVY_UNKNOWN = LaneCost(Lane.HEAVY)
"""The heavy lane for work of no known cost or model."""


QUICK_MAX_TOKENS = 512
"""The longest cached text whose requests take the quick lane (atlas_engine.compute): at most a few
hundred milliseconds of work on one core."""
QUICK_NEW_TOKENS = 64
"""A new text at most this long (an upper bound on its tokens: estimated_tokens) has its pass
run on the quick lane, on one core beside whatever the heavy lane runs, unless the heavy lane
runs that same model now (its lock would keep the quick thread waiting): a sentence then never
waits for a step of someone's long job (a layer of an 8,192-token pass takes 0.7 s here)."""
CHARS_PER_TOKEN = 3
"""A text's tokens guessed from its characters, before it is tokenised, to order work (English
reads at 3.6 characters a token in SmolLM2's tokenizer, 4.4 in MiniLM's)."""
FIRST_LOAD_SECONDS = 30.0
"""What a request that loads its model first is taken to cost (SmolLM2's first load: ~30 s)."""
STATISTICS_PER_PASS = 2.6
"""Every head's statistics over a long text, in forward passes of it: a layer's statistics at
8,190 SmolLM2 tokens took 1.6 s and its whole pass 18.5 s (docs/performance.md), so all 30
layers about 2.6 passes."""


def where_to_run(passes: Passes, body: TextRequest, pass_count: float = 1.0) -> LaneCost:
    """(lane, estimated seconds) for a request on a text: the quick lane when it reads a cached
    pass of a short text (and, for a comparison, no other text or model); else heavy(), for
    work of `pass_count` forward passes of the text (every head's statistics: more than one)."""
    other = getattr(body, "other", None)
    alone = other is None or (other.text is None and other.model is None)
    held = passes.cache.held((body.model, body.text, body.text_pair))
    if alone and held is not None and held.seq_len <= QUICK_MAX_TOKENS:
        return LaneCost(Lane.QUICK)
    loaded = passes.manager.loaded_or_none(body.model)
    if (
        alone
        and loaded is not None
        and not compute.heavy_runs(body.model)
        and estimated_tokens(loaded, body.text, body.text_pair) <= QUICK_NEW_TOKENS
    ):
        return LaneCost(Lane.QUICK)
    return heavy(passes, body, pass_count)


def heavy(passes: Passes, body: TextRequest, pass_count: float = 1.0) -> LaneCost:
    """The heavy lane, ordered by `pass_count` forward passes of the request's text, guessed from
    its length (or the model's first load), with its model (none where a comparison reads a
    second one)."""
    other = getattr(body, "other", None)
    model = body.model if other is None or other.model in (None, body.model) else None
    loaded = passes.manager.loaded_or_none(body.model)
    text = (body.model, body.text, body.text_pair)
    if loaded is None:  # the load goes first; it is paid once, so the bound does not count it
        return LaneCost(Lane.HEAVY, FIRST_LOAD_SECONDS, model, counted=0.0, text=text)
    chars = len(body.text) + len(body.text_pair or "")
    seconds = ForwardResult.seconds_for(loaded.arch, 2 + chars // CHARS_PER_TOKEN)
    # Admitted, and let run beside a long job, by an upper bound: digits and emoji beat the
    # typical ratio that orders the queue (SmolLM2 reads a digit, and up to a byte, a token).
    bound = estimated_tokens(loaded, body.text, body.text_pair)
    at_most = ForwardResult.seconds_for(loaded.arch, bound)
    return LaneCost(
        Lane.HEAVY, seconds * pass_count, model, counted=at_most * pass_count, text=text
    )


def statistics_passes(passes: Passes, body: TextRequest) -> float:
    """What every head's statistics of the layers asked (all where `layers` is absent) cost,
    in forward passes: the pass itself, and STATISTICS_PER_PASS for all the layers."""
    layers = getattr(body, "layers", None)
    loaded = passes.manager.loaded_or_none(body.model)
    if layers is None or loaded is None:
        return 1.0 + STATISTICS_PER_PASS
    return 1.0 + STATISTICS_PER_PASS * min(1.0, len(layers) / loaded.arch.num_layers)


async def run_with_room(
    fn: Callable[..., T],
    *args: object,
    cost: LaneCost = HEAVY_UNKNOWN,
    gone: Callable[[], bool] | None = None,
    queued: Future | None = None,
) -> T:
    """fn(*args) where `cost` says (run_on_compute, admitted within the queue limits); when a
    reservation finds no room there (NoRoomYet), wait for the room here, off the lane, for at
    most the budget's wait, and run fn again; after that wait, the 503 the reservation would
    have given. `gone`: whether the client has left (a job not started yet is dropped).
    `queued`: fn(*args) queued already (compute.queue_on_compute), awaited as its first run."""
    deadline = None
    while True:
        try:
            if queued is not None:
                first, queued = queued, None
                return await asyncio.wrap_future(first)
            return await run_on_compute(fn, *args, **cost._asdict(), gone=gone)
        except NoRoomYet as short:
            budget = short.budget
            deadline = deadline or time.monotonic() + budget.wait_seconds
            if not await budget.room_for(short.nbytes, deadline - time.monotonic()):
                raise budget.busy(short.nbytes) from None


async def until_disconnect(
    request: Request,
    work: Callable[[Callable[[], bool]], T],
    lane_cost: LaneCost = HEAVY_UNKNOWN,
) -> T:
    """Run `work(should_stop)` where `lane_cost` says; should_stop turns True if the client
    leaves: a job still queued is then dropped at once, one running stops at its next check.
    Waiting costs the event loop nothing: the watcher sleeps in one receive() until the server
    says the client disconnected (the body has been read: nothing else can arrive)."""
    gone = threading.Event()

    async def watch() -> None:
        while (await request.receive())["type"] != "http.disconnect":
            pass
        gone.set()
        compute.drop_gone()

    watcher = asyncio.create_task(watch())
    try:
        return await run_with_room(work, gone.is_set, cost=lane_cost, gone=gone.is_set)
    finally:
        watcher.cancel()


PassService = Callable[[Passes, TextRequest, Callable[[], bool]], T]
"""A service answering from a text's forward pass: (passes, body, should_stop)."""


async def answer_from_pass(
    request: Request,
    service: PassService[T],
    passes: Passes,
    body: TextRequest,
    pass_count: float = 1.0,
) -> T:
    """service(passes, body, should_stop) on the lane where_to_run picks (for work of
    `pass_count` forward passes of the text), stopped if the client leaves: what every route
    reading a text's forward pass does."""
    return await until_disconnect(
        request,
        lambda stop: service(passes, body, stop),
        where_to_run(passes, body, pass_count),
    )


class _Reserved:
    """What both answers below share: built with an in-flight reservation, which is released
    when the answer ends for any reason (sent, failed, client gone, reader stalled)."""

    def __init__(
        self, content, media_type: str, reservation: Reservation, headers: dict | None = None
    ) -> None:
        super().__init__(content, media_type=media_type, headers=headers)
        self.reservation = reservation

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            self.reservation.release()


class ReservedStream(_Reserved, StreamingResponse):
    """An answer streamed piece by piece from an async iterator of bytes (pieces computed on a
    compute lane as they are about to be sent: see iterate_on_compute)."""


class ReservedAnswer(_Reserved, Response):
    """An answer made whole on its compute lane (one piece, bytes), sent at once without a
    stream's machinery."""


def reserved_json(built: tuple[bytes, Reservation]) -> ReservedAnswer:
    """A JSON answer a service built whole, (body, the reservation of its bytes), sent with
    that reservation held until it is sent."""
    body, reservation = built
    return ReservedAnswer(body, "application/json", reservation)


async def stream_maps(
    request: Request,
    build: Callable[[Callable[[], bool]], tuple[MapsAnswer, Reservation]],
    lane_cost: LaneCost,
) -> ReservedStream | ReservedAnswer:
    """Build a maps answer on a compute lane (sized and reserved there) with its first piece,
    then stream the rest: on the quick lane when its maps are all in memory already (encoding
    only), so its pieces never wait behind another request's forward pass. The build also looks
    one piece ahead, so an answer of one piece is sent whole (no second trip, no stream), and a
    failure in the first piece is still an error answer, not a broken stream."""

    def build_and_begin(should_stop: Callable[[], bool]):
        answer, reservation = build(should_stop)
        pieces = answer.chunks()
        try:
            ahead = list(itertools.islice(pieces, 2))
        except BaseException:
            reservation.release()
            raise
        return answer, reservation, pieces, ahead

    answer, reservation, pieces, ahead = await until_disconnect(request, build_and_begin, lane_cost)
    headers = {}
    if answer.content_length is not None:
        headers["content-length"] = str(answer.content_length)
    if len(ahead) < 2:  # the whole answer is made already: one piece
        return ReservedAnswer(ahead[0], answer.media_type, reservation, headers)
    lane = Lane.QUICK if answer.held else lane_cost.lane
    body = _after(ahead, pieces, lane, answer.pieces_per_trip)
    return ReservedStream(body, answer.media_type, reservation, headers)


async def _after(
    ahead: list[bytes], rest: Iterator[bytes], lane: Lane, per_trip: int
) -> AsyncIterator[bytes]:
    """The pieces made with the answer, then the rest, per_trip of them made on `lane` when
    they are wanted; none is held here once handed on (held_while_sending counts what is)."""
    while ahead:
        yield ahead.pop(0)
    async for piece in iterate_on_compute(rest, lane, per_trip):
        yield piece


class ProgressStream(StreamingResponse):
    """NDJSON lines of a job admitted before the answer starts (progress_stream); when the
    answer ends, sent or not (its client gone before a line), `stop` tells the job."""

    def __init__(self, lines: AsyncIterator[bytes], stop: Callable[[], None]) -> None:
        super().__init__(lines, media_type="application/x-ndjson")
        self._stop = stop

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            self._stop()


def progress_stream(
    work: Callable[[Callable[[], bool], Callable[[int, int], None]], BaseModel],
    lane_cost: LaneCost,
    held: Reservation | None = None,
) -> ProgressStream:
    """NDJSON lines of `work(should_stop, progress)` run where `lane_cost` says: its job is
    queued now, so a refusal (the queue full, this client's share, the server stopping) is the
    request's own status, not an error line in a 200; then a progress line per call of
    progress, and work's answer, or an error line for what stopped it once under way (the
    server stopping: 503). The answer's end (sent, or its client gone) makes should_stop True,
    so the work stops at its next check. `held`: memory reserved for the work, released when
    its job ends, however it ends."""
    loop = asyncio.get_running_loop()
    lines: asyncio.Queue[BaseModel | None] = asyncio.Queue()
    gone = threading.Event()

    def progress(done: int, total: int) -> None:
        line = ForwardProgress(event="progress", layer=done, layers=total)
        loop.call_soon_threadsafe(lines.put_nowait, line)

    args = (work, gone.is_set, progress)
    try:
        queued = compute.queue_on_compute(*args, **lane_cost._asdict(), gone=gone.is_set)
    except BaseException:
        if held is not None:
            held.release()
        raise
    if held is not None:
        queued.add_done_callback(lambda _: held.release())

    async def run() -> None:
        answer: BaseModel | None = None
        try:
            answer = await run_with_room(*args, cost=lane_cost, gone=gone.is_set, queued=queued)
        except AtlasError as err:
            answer = ForwardFailed(event="error", status=err.status, detail=err.message)
        except Exception:  # the stream has started: say so in it rather than hang
            log.exception("a streamed forward pass failed")
            answer = ForwardFailed(event="error", status=500, detail="the forward pass failed")
        finally:
            if answer is not None:
                lines.put_nowait(answer)
            lines.put_nowait(None)

    task = asyncio.create_task(run())

    def stop() -> None:
        gone.set()
        compute.drop_gone()
        if not task.done():
            task.cancel()

    async def read() -> AsyncIterator[bytes]:
        while (line := await lines.get()) is not None:
            yield (line.model_dump_json() + "\n").encode("utf-8")

    return ProgressStream(read(), stop)
