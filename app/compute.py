"""One thread runs all of the server's PyTorch work.

PyTorch's CPU kernels run on OpenMP, and OpenMP (libgomp) gives every OS thread that starts a
parallel region a team of helper threads of its own, kept for as long as that thread lives.
Once the teams outnumber the cores, libgomp stops letting idle helpers spin and every kernel
pays to wake its team. Starlette's thread pool hands each request to any of up to 40 threads,
so a server that ran its tensors there slowed down as soon as two threads had served requests.
Measured on 2 cores (bench/threads.py): a (16, 384) x (384, 384) product took 34 µs on the only
thread to have used torch and 94 µs while a second one that had used it sat idle; replaying the
6 layers of a 15-token MiniLM pass 1.6 against 11.2 ms. A new 16-token MiniLM answer through
the test client took 25 ms before this module and 12 ms with it.

So routes send tensor work here, one job at a time, in the order it comes: on a CPU the
kernels of one job already use every core, so running two at once only makes both slower. A job
of a client that has left is dropped if it has not started; one that has started stops at its
next check of should_stop (a layer of a forward pass, a block of head statistics).
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator, Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

T = TypeVar("T")

_executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="atlas-compute")
_thread_ids: set[int] = set()  # the executor's one thread, once it has started


def _mark_compute_thread() -> None:
    _thread_ids.add(threading.get_ident())


_executor.submit(_mark_compute_thread).result()


def on_compute_thread() -> bool:
    """True on the thread that runs the server's tensor work."""
    return threading.get_ident() in _thread_ids


async def run_on_compute(fn: Callable[..., T], *args: object) -> T:
    """fn(*args) on the compute thread, awaited without blocking the event loop.

    If the caller is cancelled before the job starts, the job is dropped; once started it runs
    to its end (or to its own should_stop check), as Starlette's run_in_threadpool does."""
    return await asyncio.wrap_future(_executor.submit(fn, *args))


def call_on_compute(fn: Callable[..., T], *args: object) -> T:
    """fn(*args) on the compute thread, waited for here: for code outside the event loop (a
    benchmark timing the bare model beside the app) that must not start a team of its own."""
    if on_compute_thread():
        return fn(*args)
    return _executor.submit(fn, *args).result()


_DONE = object()


async def iterate_on_compute(items: Iterator[T]) -> AsyncIterator[T]:
    """A synchronous iterator (a streamed answer that computes each piece as it is asked for)
    read one item at a time on the compute thread; closed there when the stream ends early."""
    try:
        while (item := await run_on_compute(next, items, _DONE)) is not _DONE:
            yield item
    finally:  # not awaited: a cancelled stream may not wait for anything any more
        close = getattr(items, "close", None)
        if close is not None:
            _executor.submit(close)
