"""Where a request's time goes, stage by stage (load, tokenize, forward, the compute lanes'
queue and work): the numbers the server's `Server-Timing` header reports (app/timing.py).

The stages are added up in a dict the current context holds (a ContextVar), which the server
sets for each request (`collecting`): the event loop's part sees it directly and the compute
lanes run each job in a copy of the submitting context (app.compute), so a stage timed on a
lane lands in the request that asked for it. Outside a request (a notebook, a benchmark)
timing adds nothing and costs one lookup.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

STAGES = {
    "app": "from the request reaching the app to its answer's head",
    "queue": "waiting for a compute lane (passes run one at a time), or for short jobs run "
    "between two of this request's layers",
    "compute": "work on the compute lanes before the answer's head (load, tokenize and forward "
    "included)",
    "load": "loading the model (the first request for it)",
    "tokenize": "tokenising the text (a text the server has not seen)",
    "forward": "the model's forward pass (a text whose pass is not cached)",
}
"""Each metric the header may name, in the order it is written, with what it measures."""

_stages: ContextVar[dict[str, float] | None] = ContextVar("atlas_server_timing", default=None)


def add(stage: str, seconds: float) -> None:
    """Add `seconds` to this request's `stage` (nothing outside a request)."""
    stages = _stages.get()
    if stages is not None:
        stages[stage] = stages.get(stage, 0.0) + seconds


@contextmanager
def timed(stage: str) -> Iterator[None]:
    """`with timed("tokenize"):` adds the block's duration to this request's stage."""
    start = time.perf_counter()
    try:
        yield
    finally:
        add(stage, time.perf_counter() - start)


@contextmanager
def collecting(stages: dict[str, float]) -> Iterator[dict[str, float]]:
    """`with collecting({}) as stages:` every stage timed in this context meanwhile adds up in
    `stages`."""
    token = _stages.set(stages)
    try:
        yield stages
    finally:
        _stages.reset(token)
