"""Where the server's PyTorch work runs: two lanes of threads, so that no kernel pays for another
thread's OpenMP team.

PyTorch's CPU kernels run on OpenMP, and OpenMP (libgomp) gives every OS thread that starts a
parallel region a team of helper threads of its own, kept for as long as that thread lives.
Once the teams outnumber the cores, libgomp stops letting idle helpers spin and every kernel
pays to wake its team. Starlette's thread pool hands each request to any of up to 40 threads,
so a server that ran its tensors there slowed down as soon as two threads had served requests.
Measured on 2 cores (bench/threads.py): a (16, 384) x (384, 384) product took 34 µs on the only
thread to have used torch and 94 µs while a second one that had used it sat idle; replaying the
6 layers of a 15-token MiniLM pass 1.6 against 11.2 ms.

- The heavy lane is one thread with PyTorch's intra-op threads (one a core): forward passes,
  generation, and whatever a request needs on a text whose pass is not cached yet or is long.
  One job at a time (on a CPU one job's kernels already use every core), earliest deadline
  first: a job's deadline is when it came plus PATIENCE times what it is estimated to cost (at
  most a minute), so short passes go before long ones that wait, and no job waits for ever.
  A long pass lets short jobs run between two of its layers (run_beside), so a sentence waits
  for a layer of someone's 8,192-token SmolLM2 pass, not for all of it.
- The quick lane is QUICK_THREADS threads, each running PyTorch on itself alone (one intra-op
  thread, so no team): requests answered from a cached pass of a short text, the lab's small
  computations and the pieces of their answers. They never wait behind a forward pass (under
  20 clients, a cached answer's median went from 26 to 3 ms: docs/performance.md).

A job of a client that has left is dropped if it has not started; one that has started stops at
its next check of should_stop (a layer of a forward pass, a block of head statistics, a tile
of deep zoom, a batched rerun of exact patching). A job joins a lane's queue only while the
queue has room (atlas_engine.admission: by count, by the seconds of work waiting, and by one
client's share); past that its request gets 503 or 429 at once. Once the server begins to
shut down (begin_shutdown), queued jobs fail at once and running ones stop at their next step.
"""

from __future__ import annotations

import asyncio
import contextvars
import enum
import heapq
import itertools
import os
import sys
import threading
import time
from collections.abc import AsyncIterator, Callable, Hashable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import NamedTuple, TypeVar

import torch

from atlas_engine import timing
from atlas_engine.admission import CLIENT, LIMITS, QueueLimits, check_heavy, check_quick
from atlas_engine.config import get_settings
from atlas_engine.errors import RequestCancelled, ServerBusy

T = TypeVar("T")


def cpu_quota_cores(root: Path = Path("/sys/fs/cgroup")) -> int | None:
    """Whole cores the process's cgroup may use (a container's CPU limit), or None without a
    limit. PyTorch counts the machine's cores, and a team of more threads than the quota
    allows only takes turns on it."""
    for quota_file, period_file in (
        ("cpu.max", None),
        ("cpu/cpu.cfs_quota_us", "cpu/cpu.cfs_period_us"),
    ):
        try:
            fields = (root / quota_file).read_text().split()
            quota = fields[0]
            period = fields[1] if period_file is None else (root / period_file).read_text().strip()
        except (OSError, IndexError):
            continue
        if quota in ("max", "-1"):
            return None
        return max(1, int(quota) // int(period))
    return None


QUICK_THREADS = 2
PATIENCE = 30
"""How long a heavy job may be passed by shorter ones, in multiples of its own estimated cost
(under 20 clients, new MiniLM answers waited a median 125 ms with 30 and 579 ms with 10)..."""
MOST_PASSED_SECONDS = 60.0
"""... and at most this long, however long it is estimated to run."""
_DEFAULT_THREADS = min(torch.get_num_threads(), cpu_quota_cores() or torch.get_num_threads())
"""The heavy lane's threads: PyTorch's own choice (one a core), within a container's CPU limit."""
HEAVY_LANE_NICE = 10
"""The heavy lane's scheduling priority below the rest of the server, by default (the setting
ATLAS_HEAVY_LANE_NICE; Linux: a thread's nice value, which the OpenMP helpers it starts
inherit). After each parallel region libgomp's helpers spin for a while (about 8 ms after a
pass here) before they sleep: at the same priority they held
one of this machine's two cores against the event loop and the client that were sending and
reading the answer just made (a new 16-token answer's last byte read 0.4-3.5 ms after it was
sent, against 0.2-0.4 ms with this: docs/performance.md). Under load the event loop and the
quick lane, which answer from cached passes, go before passes too."""
_threads_lock = threading.Lock()
_lane_threads: set[int] = set()


def lower_priority(nice: int) -> None:
    """Lower the calling thread's priority by `nice` more (Linux only: elsewhere a nice value
    is the whole process's). Lowering one's own priority needs no privilege."""
    if sys.platform == "linux" and nice > 0:
        thread = threading.get_native_id()
        now = os.getpriority(os.PRIO_PROCESS, thread)
        os.setpriority(os.PRIO_PROCESS, thread, min(19, now + nice))


def _start_heavy_thread() -> None:
    """The heavy lane keeps PyTorch's intra-op threads (a thread reads the process-wide count
    once, the first time it needs it, and keeps its own from then on), at the operator's
    ATLAS_HEAVY_LANE_NICE (HEAVY_LANE_NICE by default) before it starts them."""
    lower_priority(get_settings().heavy_lane_nice)
    with _threads_lock:
        torch.get_num_threads()  # a thread reads the process-wide count at its first ask
        torch.set_num_threads(_DEFAULT_THREADS)
        _lane_threads.add(threading.get_ident())


def _start_quick_thread() -> None:
    """A quick-lane thread runs PyTorch on itself alone; the process-wide count that other
    threads start from is put back at once (by a thread that runs no kernel)."""
    with _threads_lock:
        torch.get_num_threads()  # this thread reads the process-wide count now, then lowers it
        torch.set_num_threads(1)
        restore = threading.Thread(target=torch.set_num_threads, args=(_DEFAULT_THREADS,))
        restore.start()
        restore.join()
        _lane_threads.add(threading.get_ident())


class Lane(enum.Enum):
    HEAVY = "heavy"
    QUICK = "quick"


NESTED_MOST_SECONDS = 0.5
"""A waiting heavy job estimated at most this long is run inside a running one between two of
its layers (EarliestDeadlineFirst.run_beside): a sentence waits for a layer of someone's
8,192-token SmolLM2 pass (about 0.7 s here), not for the whole pass (20 s)..."""
SLICE_SECONDS = 0.25
"""... at any age of the running job, for at most this long between two of its steps: short
jobs keep flowing beside a long one, and a flood of them still leaves it most of the lane (its
steps are a layer of a pass or a block of rows, about 0.7 s at 8,192 SmolLM2 tokens)."""

_shutting_down = threading.Event()


class ShuttingDown(RequestCancelled):
    """The server is shutting down: a running job stops at its next step, a queued one fails."""

    status = 503
    code = "busy"

    def __init__(self, message: str) -> None:
        super().__init__(message, {"Retry-After": "5"})


class _Job(NamedTuple):
    deadline: float
    order: int  # ties in submission order; never equal, so the fields below are never compared
    future: Future
    fn: Callable
    args: tuple
    seconds: float
    model: str | None  # the one model the job runs (None: none known, or several)
    client: str | None = None  # who sent it (admission's per-client share)
    gone: Callable[[], bool] | None = None  # True once its client has left: dropped unstarted
    counted: float = 0.0  # its seconds as admission counts them (not a model's first load)
    text: Hashable = None  # the text whose pass it reads (model, text, pair), where known

    @property
    def long(self) -> bool:
        """Too long to run beside another: what a client's share of the queue counts."""
        return self.counted > NESTED_MOST_SECONDS

    @property
    def short(self) -> bool:
        """Short enough to run beside a long job by both its estimates (its order's, and the
        bound admission counts; a model's first load, counted 0, is still 30 s of order)."""
        return max(self.seconds, self.counted) <= NESTED_MOST_SECONDS


class EarliestDeadlineFirst:
    """One thread running submitted jobs one at a time, the earliest deadline first (deadline:
    the time of submission plus PATIENCE times the job's estimated seconds, at most
    MOST_PASSED_SECONDS; ties in submission order): shorter jobs first, and a long one is
    passed for a bounded time. A job that says which model it runs may also let short jobs
    run inside it, between two of its steps (run_beside)."""

    def __init__(self, name: str, initializer: Callable[[], None]) -> None:
        self._name = name
        self._initializer = initializer
        self._jobs: list[_Job] = []
        self._order = itertools.count()
        self._ready = threading.Condition()
        self._thread: threading.Thread | None = None
        self._running: list[_Job] = []  # on the lane's thread: the job, and one run inside it
        self._running_since = 0.0  # when the outer running job started (time.monotonic)
        self.nested_seconds = 0.0  # how long jobs have run inside others, in all

    def submit(
        self,
        fn: Callable[..., T],
        *args: object,
        seconds: float = 0.0,
        model: str | None = None,
        limits: QueueLimits | None = None,
        client: str | None = None,
        gone: Callable[[], bool] | None = None,
        counted: float | None = None,
        text: Hashable = None,
    ) -> Future:
        """Queue fn(*args); with `limits`, only while the queue has room for it (else the
        admission error, raised here, before anything is queued). `counted`: its seconds as the
        bound counts them, where they differ from its order's (a model's first load is paid
        once, however many requests wait for it)."""
        future: Future = Future()
        counted = seconds if counted is None else counted
        with self._ready:
            if _shutting_down.is_set():
                raise ServerBusy("the server is shutting down; retry on another", retry_after=5)
            if limits is not None:
                mine = self._charged(client) if counted > NESTED_MOST_SECONDS else []
                check_heavy(
                    limits,
                    counted,
                    len(self._jobs),
                    self._waiting_seconds(limits.per_client_seconds),
                    len(mine),
                    sum(mine),
                )
            deadline = time.monotonic() + min(PATIENCE * seconds, MOST_PASSED_SECONDS)
            job = _Job(
                deadline, next(self._order), future, fn, args, seconds, model, client, gone,
                counted, text,
            )  # fmt: skip
            heapq.heappush(self._jobs, job)
            if self._thread is None:
                self._thread = threading.Thread(target=self._work, name=self._name, daemon=True)
                self._thread.start()
            self._ready.notify()
        future.add_done_callback(lambda done: done.cancelled() and self._forget(job))
        return future

    def _charged(self, client: str | None) -> list[float]:
        """The long work `client` has queued, a job at a time, in seconds as admission counts
        them: each of its long jobs waiting, and what is left of its long job running (the
        lane is busy with it, so the client's next long job waits behind it as others' do).
        Without the running job, a client's first waiting job was never charged to it: two
        8,192-token requests put 237 s in the queue and locked every other client out."""
        if client is None:
            return []
        seconds = [job.counted for job in self._jobs if job.client == client and job.long]
        running = self._running[:1]  # a copy: the lane's thread changes it
        if running and running[0].client == client and running[0].long:
            ran = time.monotonic() - self._running_since
            seconds.append(max(0.0, running[0].counted - ran))
        return seconds

    def _waiting_seconds(self, share: float) -> float:
        """The waiting jobs' seconds as the queue's bound counts them: each client's at most
        its `share` (the one job a client may queue past its share, on a lane where it had
        none, is charged to that client, not to every other client's admission)."""
        by_client: dict[str, float] = {}
        anyone = 0.0  # jobs of no known client (benchmarks, background work)
        for job in self._jobs:
            if job.client is None:
                anyone += job.counted
            else:
                by_client[job.client] = by_client.get(job.client, 0.0) + job.counted
        return anyone + sum(min(seconds, share) for seconds in by_client.values())

    def _forget(self, job: _Job) -> None:
        """Take a job out of the queue (its caller cancelled it): nothing it holds stays."""
        with self._ready:
            if job in self._jobs:
                self._jobs.remove(job)
                heapq.heapify(self._jobs)

    def drop_gone(self) -> int:
        """Fail every queued job whose client has left (RequestCancelled), at once; returns how
        many. Their requests then end, and what they hold (bodies, parsed texts) is freed."""
        with self._ready:
            gone = [job for job in self._jobs if job.gone is not None and job.gone()]
            for job in gone:
                self._jobs.remove(job)
            heapq.heapify(self._jobs)
        for job in gone:
            if job.future.set_running_or_notify_cancel():
                job.future.set_exception(RequestCancelled("the client went away before its turn"))
        return len(gone)

    def fail_all(self, error: BaseException) -> None:
        """Fail every queued job with `error` (at shutdown)."""
        with self._ready:
            jobs, self._jobs = self._jobs, []
        for job in jobs:
            if job.future.set_running_or_notify_cancel():
                job.future.set_exception(error)

    def queued(self) -> tuple[int, float]:
        """(jobs waiting, their estimated seconds as admission counts them)."""
        with self._ready:
            return len(self._jobs), sum(job.counted for job in self._jobs)

    def _work(self) -> None:
        self._initializer()
        while True:
            with self._ready:
                while not self._jobs:
                    self._ready.wait()
                job = heapq.heappop(self._jobs)
            if job.gone is not None and job.gone() and job.future.set_running_or_notify_cancel():
                job.future.set_exception(RequestCancelled("the client went away before its turn"))
                continue
            self._run(job)

    def _run(self, job: _Job) -> None:
        if not job.future.set_running_or_notify_cancel():
            return  # its caller has gone: never started
        if not self._running:
            self._running_since = time.monotonic()
        self._running.append(job)
        try:
            result = job.fn(*job.args)
        except BaseException as err:  # handed to the caller, as an executor would
            self._running.pop()  # first: its caller may submit its next job at once
            job.future.set_exception(err)
        else:
            self._running.pop()  # (and that job's client is not charged for this one)
            job.future.set_result(result)

    def run_beside(self) -> None:
        """Between two steps of the running job (a layer of a forward pass), on the lane's
        thread: run the waiting jobs that may go inside it, earliest deadline first, for at
        most SLICE_SECONDS: each estimated at most NESTED_MOST_SECONDS and saying which one
        model it runs. At any age of the running job (a sentence sent a minute into a long
        one still runs beside it). On the running job's own model too: its lock is re-entrant,
        and the running pass's hooks leave alone what runs one level deeper (depth). Nothing
        anywhere else, inside a job run so, or where the running job's model is not known."""
        if not self._jobs or threading.current_thread() is not self._thread:
            return
        if len(self._running) != 1 or self._running[0].model is None:
            return
        running = self._running[0]
        slice_ends = time.perf_counter() + SLICE_SECONDS
        while time.perf_counter() < slice_ends:
            with self._ready:
                fits = [
                    job
                    for job in self._jobs
                    if job.short
                    and job.model is not None
                    and (job.text is None or job.text != running.text)
                ]  # never the running job's own text: it waits for that pass, and shares it
                if not fits:
                    return
                job = min(fits)
                self._jobs.remove(job)
                heapq.heapify(self._jobs)
            if job.gone is not None and job.gone() and job.future.set_running_or_notify_cancel():
                job.future.set_exception(RequestCancelled("the client went away before its turn"))
                continue
            start = time.perf_counter()
            try:
                self._run(job)
            finally:
                self.nested_seconds += time.perf_counter() - start


_heavy = EarliestDeadlineFirst("atlas-heavy", _start_heavy_thread)
_quick = ThreadPoolExecutor(QUICK_THREADS, "atlas-quick", initializer=_start_quick_thread)
_quick_waiting = 0  # jobs submitted to the quick lane and not started yet
_quick_lock = threading.Lock()


def begin_shutdown() -> None:
    """The server is shutting down: queued jobs fail at once (503), running ones stop at
    their next step (between_steps, a forward pass's layer hook), and nothing new is queued.
    Called when the server starts its graceful shutdown, before it waits for connections."""
    _shutting_down.set()
    _heavy.fail_all(ShuttingDown("the server is shutting down"))
    _quick.shutdown(wait=False, cancel_futures=True)  # its queued jobs too (running ones end)


def shutting_down() -> bool:
    return _shutting_down.is_set()


def heavy_runs(model: str) -> bool:
    """Whether the heavy lane runs a job on `model` now (its pass holds the model's lock)."""
    running = list(_heavy._running)  # a copy: the lane's thread changes it
    return any(job.model in (model, None) for job in running)


def drop_gone() -> int:
    """Fail the queued heavy-lane jobs whose clients have left (EarliestDeadlineFirst.drop_gone)."""
    return _heavy.drop_gone()


def queued() -> tuple[int, float]:
    """The heavy lane's waiting jobs and their estimated seconds."""
    return _heavy.queued()


def run_beside() -> None:
    """Let short heavy-lane jobs run now, inside the job calling this between two of its steps
    (EarliestDeadlineFirst.run_beside); nothing off the heavy lane."""
    _heavy.run_beside()


def between_steps(should_stop: Callable[[], bool] | None, what: str) -> Callable[[], None]:
    """What a long job calls between two of its steps (blocks of rows, tiles): stop with
    RequestCancelled if its client has gone (should_stop; `what` names the unfinished work),
    else let a short job waiting on the heavy lane run first (run_beside)."""

    def step() -> None:
        if should_stop is not None and should_stop():
            raise RequestCancelled(f"the client went away before {what} were done")
        if _shutting_down.is_set():
            raise ShuttingDown(f"the server is shutting down; {what} were not done")
        run_beside()

    return step


def depth() -> int:
    """How many jobs are running on this thread, one inside the other: 1 for a job of the heavy
    lane, 2 inside it (run_beside); 0 off the heavy lane. A pass's hooks act at its own depth
    only, so that a pass run inside it on the same model is not taken for it."""
    return len(_heavy._running) if threading.current_thread() is _heavy._thread else 0


def nested_seconds() -> float:
    """Seconds the heavy lane has spent on jobs run inside others, in all (OwnClock reads it).
    0 off the heavy lane, where nothing runs inside anything."""
    return _heavy.nested_seconds if threading.current_thread() is _heavy._thread else 0.0


class OwnClock:
    """A job's own time from now on: its wall time less what jobs run inside it took meanwhile
    (run_beside), read on the thread it was started on."""

    def __init__(self) -> None:
        self.started = time.perf_counter()
        self._nested_before = nested_seconds()

    def inside(self) -> float:
        """Seconds jobs run inside this one have taken since it started."""
        return nested_seconds() - self._nested_before

    def own(self) -> float:
        """Seconds since it started, less inside()."""
        return time.perf_counter() - self.started - self.inside()


def _submit(
    lane: Lane,
    fn: Callable[..., T],
    args: tuple,
    seconds: float,
    model: str | None = None,
    gone: Callable[[], bool] | None = None,
    admit: bool = False,
    counted: float | None = None,
    text: Hashable = None,
) -> Future:
    """Queue fn(*args) on `lane`; with `admit`, only within the request's queue limits (the
    context's atlas_engine.admission.LIMITS, with its CLIENT), else the admission error now."""
    global _last_request
    limits = LIMITS.get() if admit else None
    if admit:
        _last_request = time.monotonic()  # a request's work: background work steps aside
    job = _in_callers_context(fn)
    if lane is Lane.HEAVY:
        return _heavy.submit(
            job, *args, seconds=seconds, model=model, limits=limits, client=CLIENT.get(),
            gone=gone, counted=counted, text=text,
        )  # fmt: skip
    return _submit_quick(job, args, limits, gone)


def _submit_quick(
    job: Callable[..., T],
    args: tuple,
    limits: QueueLimits | None,
    gone: Callable[[], bool] | None,
) -> Future:
    """The quick lane's executor, counting what waits there (its queue has no bound of its own)."""
    global _quick_waiting
    with _quick_lock:
        if _shutting_down.is_set() and limits is not None:
            raise ServerBusy("the server is shutting down; retry on another", retry_after=5)
        if limits is not None:
            check_quick(limits, _quick_waiting)
        _quick_waiting += 1

    def started(*job_args: object) -> T:
        global _quick_waiting
        with _quick_lock:
            _quick_waiting -= 1
        if gone is not None and gone():
            raise RequestCancelled("the client went away before its turn")
        return job(*job_args)

    try:
        return _quick.submit(started, *args)
    except BaseException:
        with _quick_lock:
            _quick_waiting -= 1
        raise


def _in_callers_context(fn: Callable[..., T]) -> Callable[..., T]:
    """fn, run in a copy of the submitting context (a request's Server-Timing stages: app.timing),
    its wait for the lane timed as `queue` and its run as `compute`; the time other jobs ran
    inside it (nested_seconds) counts as waiting, not as its compute."""
    context = contextvars.copy_context()
    submitted = time.perf_counter()

    def timed_job(*args: object) -> T:
        clock = OwnClock()
        timing.add("queue", clock.started - submitted)
        try:
            return fn(*args)
        finally:
            timing.add("queue", clock.inside())
            timing.add("compute", clock.own())

    return lambda *args: context.run(timed_job, *args)


def on_compute_thread() -> bool:
    """True on a thread of either lane."""
    return threading.get_ident() in _lane_threads


def queue_on_compute(
    fn: Callable[..., T],
    *args: object,
    lane: Lane = Lane.HEAVY,
    seconds: float = 0.0,
    model: str | None = None,
    gone: Callable[[], bool] | None = None,
    counted: float | None = None,
    text: Hashable = None,
) -> Future:
    """fn(*args) queued on `lane` now, as run_on_compute queues it (the same arguments), its
    admission error raised here: for an answer that must know its job is admitted before it
    starts (a stream, whose status goes first)."""
    return _submit(lane, fn, args, seconds, model, gone, admit=True, counted=counted, text=text)


async def run_on_compute(
    fn: Callable[..., T],
    *args: object,
    lane: Lane = Lane.HEAVY,
    seconds: float = 0.0,
    model: str | None = None,
    gone: Callable[[], bool] | None = None,
    counted: float | None = None,
    text: Hashable = None,
) -> T:
    """fn(*args) on a thread of `lane`, awaited without blocking the event loop; `seconds` is
    what the job is estimated to cost (the heavy lane's order), `model` the one model it runs,
    where known (a short job on one model may run inside a long one on another: run_beside),
    `gone` whether its client has left (a job not started yet is then dropped), `text` the
    text whose pass it reads (never run inside a job on the same text). It is queued
    only within the request's queue limits (atlas_engine.admission, counting `counted` seconds where
    given, else `seconds`), else that 503 or 429 now.

    If the caller is cancelled before the job starts, the job is dropped; once started it runs
    to its end (or to its own should_stop check), as Starlette's run_in_threadpool does."""
    future = queue_on_compute(
        fn, *args, lane=lane, seconds=seconds, model=model, gone=gone, counted=counted, text=text
    )
    return await asyncio.wrap_future(future)


def call_on_compute(fn: Callable[..., T], *args: object) -> T:
    """fn(*args) on the heavy lane, waited for here: for code outside the event loop (a
    benchmark timing the bare model beside the app) that must not start a team of its own."""
    if on_compute_thread():
        return fn(*args)
    return _heavy.submit(fn, *args).result()


def _next_items(items: Iterator[T], count: int) -> list[T]:
    """Up to `count` items of the iterator (fewer only at its end)."""
    return list(itertools.islice(items, count))


async def iterate_on_compute(
    items: Iterator[T], lane: Lane = Lane.HEAVY, per_trip: int = 1
) -> AsyncIterator[T]:
    """A synchronous iterator (a streamed answer that computes each piece as it is asked for)
    read on `lane`, per_trip items a trip (once the last trip's are handed on); closed there
    when the stream ends early."""
    finished = False
    try:
        while True:
            # A stream's pieces are not admitted again: its request was, when it began.
            batch = await asyncio.wrap_future(_submit(lane, _next_items, (items, per_trip), 0.0))
            for item in batch:
                yield item
            if len(batch) < per_trip:
                break
        finished = True
    finally:  # not awaited: a cancelled stream may not wait for anything any more
        close = getattr(items, "close", None)
        if close is not None and not finished:
            _submit(lane, close, (), 0.0)


IDLE_POLL_SECONDS = 0.05
QUIET_SECONDS = 1.0
"""Background work starts a step only once no request has queued work for this long: a page
being used (its requests come in bursts) has the cores to itself, not beside a corpus text."""
_last_request = 0.0  # time.monotonic() of the last request's job submitted to either lane


def idle() -> bool:
    """No job waits on either lane, and no request has queued any for QUIET_SECONDS."""
    with _quick_lock:
        quick = _quick_waiting
    return not queued()[0] and not quick and time.monotonic() - _last_request >= QUIET_SECONDS


def run_when_idle(fn: Callable[..., T], *args: object, model: str) -> T:
    """fn(*args) on the heavy lane once the server is idle (idle()), waited for here: for work
    nobody waits for (the corpus job the server runs beside its requests,
    atlas_engine.corpus.background). It is queued as the longest job the lane orders (passed by
    every request sent before its deadline of MOST_PASSED_SECONDS), counted as no work by
    admission, and never run inside another job; short jobs run inside it between its steps
    (run_beside: `model` is the model it runs). Raises ShuttingDown once the server begins to
    stop."""
    while not idle():
        if _shutting_down.is_set():
            break
        time.sleep(IDLE_POLL_SECONDS)
    if _shutting_down.is_set():
        raise ShuttingDown("the server is shutting down; background work stopped")
    seconds = MOST_PASSED_SECONDS / PATIENCE  # its deadline: the latest the lane gives any job
    return _heavy.submit(fn, *args, seconds=seconds, model=model, counted=0.0).result()
