"""Admission before work: a request's job joins a compute lane's queue only while the queue has
room, by count, by the seconds of work already waiting, and by the share one client holds
(its long jobs waiting and the one running: what a client queues is charged to that client);
past that the request gets 503 (or 429 for one client's share) with Retry-After at once,
instead of waiting without bound.

What a request is and who sent it reach the lanes through two context variables, set once per
request by AdmissionContext (after the proxy headers are read, so a client behind a trusted
proxy is itself, not the proxy): atlas_engine.compute.run_on_compute reads them when it submits a job.
"""

from __future__ import annotations

import contextvars
import math
from dataclasses import dataclass

from atlas_engine.errors import AtlasError, ServerBusy


@dataclass(frozen=True)
class QueueLimits:
    """How much work may wait for the lanes (atlas_engine.config: ATLAS_QUEUE_*)."""

    heavy_jobs: int = 64  # jobs waiting for the heavy lane, from all clients
    heavy_seconds: float = 120.0  # their estimated seconds of work, in all
    per_client_jobs: int = 8  # long jobs one client may have waiting for the heavy lane
    quick_jobs: int = 256  # jobs waiting for the quick lane

    @property
    def per_client_seconds(self) -> float:
        """One client may hold at most half the heavy lane's waiting work."""
        return self.heavy_seconds / 2


class TooMuchFromOneClient(AtlasError):
    """One client's share of the waiting work is full; others' requests still get in."""

    status = 429
    code = "rate_limited"

    def __init__(self, message: str, retry_after: int) -> None:
        super().__init__(message, {"Retry-After": str(retry_after)})


CLIENT: contextvars.ContextVar[str | None] = contextvars.ContextVar("atlas_client", default=None)
LIMITS: contextvars.ContextVar[QueueLimits | None] = contextvars.ContextVar(
    "atlas_queue_limits", default=None
)


def _retry_after(seconds: float) -> int:
    return max(1, min(600, math.ceil(seconds)))


def check_heavy(
    limits: QueueLimits,
    seconds: float,
    queued_jobs: int,
    queued_seconds: float,
    client_jobs: int,
    client_seconds: float,
) -> None:
    """Raise unless a heavy job estimated at `seconds` may join a queue holding queued_jobs
    jobs of queued_seconds (each client's counted up to its share), while its client has
    client_jobs long jobs of client_seconds queued: waiting, and what is left of the one
    running. A short job, one that may run beside a long one, is never held to its client's
    share, so a page's many small requests all get in. A job that finds no work waiting
    always gets in, however long, and so does one whose client has none queued: the bound is
    on what waits, so a long pass still runs; but that pass, waiting or running, is then its
    client's whole share, and what it holds up counts against no other client."""
    if queued_jobs >= limits.heavy_jobs:
        raise ServerBusy(
            f"{queued_jobs} jobs are waiting for the server's compute lane, its limit "
            f"(ATLAS_QUEUE_HEAVY_JOBS); retry shortly",
            retry_after=_retry_after(queued_seconds),
        )
    if queued_seconds > 0 and queued_seconds + seconds > limits.heavy_seconds:
        raise ServerBusy(
            f"about {queued_seconds:,.0f} s of work is waiting for the server's compute lane "
            f"and this request needs about {seconds:,.1f} s more, past the "
            f"{limits.heavy_seconds:,.0f} s it lets wait (ATLAS_QUEUE_HEAVY_SECONDS)",
            retry_after=_retry_after(queued_seconds),
        )
    if client_jobs >= limits.per_client_jobs or (
        client_jobs > 0 and client_seconds + seconds > limits.per_client_seconds
    ):
        raise TooMuchFromOneClient(
            f"this client has {client_jobs} long jobs (about {client_seconds:,.0f} s of work "
            "left) queued for the compute lane, waiting or running, and this one needs about "
            f"{seconds:,.0f} s more, past its share (ATLAS_QUEUE_PER_CLIENT_JOBS, half of "
            "ATLAS_QUEUE_HEAVY_SECONDS); retry when they are done",
            retry_after=_retry_after(client_seconds),
        )


def check_quick(limits: QueueLimits, queued_jobs: int) -> None:
    """Raise unless a job may join the quick lane's queue of queued_jobs."""
    if queued_jobs >= limits.quick_jobs:
        raise ServerBusy(
            f"{queued_jobs} short jobs are waiting for the server's quick lane, its limit "
            "(ATLAS_QUEUE_QUICK_JOBS); retry shortly",
            retry_after=1,
        )
