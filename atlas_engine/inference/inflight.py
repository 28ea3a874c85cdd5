"""A bound on what answers in flight may hold in memory.

An answer streamed to a slow client keeps its forward pass alive until the last byte is sent,
whether or not the cache still holds it. Each answer reserves the bytes of the forward pass it
reads before that pass is computed or looked up; a pass read by several answers at once is
counted once. When the budget is spent, new large answers wait a little and then get 503 with
Retry-After, so the memory held for answers never exceeds `max_bytes`.
"""

from __future__ import annotations

import asyncio
import math
import threading
import time
from collections.abc import Hashable

from atlas_engine.compute import on_compute_thread
from atlas_engine.errors import ServerBusy


class NoRoomYet(Exception):
    """Raised by AnswerBudget.reserve on a compute lane instead of waiting there (a lane that
    waits holds up every job behind it, and the streams that would free the room may need it):
    the caller waits for the room off the lane (AnswerBudget.room_for), then runs the work
    again. Reservations come before the work they pay for, so little is done twice."""

    def __init__(self, budget: AnswerBudget, nbytes: int) -> None:
        super().__init__(f"no room yet for {nbytes} bytes")
        self.budget = budget
        self.nbytes = nbytes


class Reservation:
    """What one answer holds; release() is idempotent and must run when the answer ends."""

    def __init__(self, budget: AnswerBudget, key: Hashable) -> None:
        self._budget = budget
        self._key = key
        self._released = False

    def release(self) -> None:
        if not self._released:
            self._released = True
            self._budget._release(self._key)


class Reservations(Reservation):
    """Several reservations released together (a forward pass and an answer's own working set)."""

    def __init__(self, *parts: Reservation) -> None:
        self._parts = parts

    def release(self) -> None:
        for part in self._parts:
            part.release()


ANSWERS = "forward passes and answers"
"""What a reservation holds, unless it says otherwise (app.limits: "request bodies")."""


class AnswerBudget:
    """Reserve bytes per forward pass (by key), with a wait of at most `wait_seconds`; each
    reservation says what it holds (`kind`), so a refusal names what fills the budget."""

    def __init__(self, max_bytes: int, wait_seconds: float) -> None:
        self.max_bytes = max_bytes
        self.wait_seconds = wait_seconds
        # key -> (bytes, answers reading it, what they are)
        self._held: dict[Hashable, tuple[int, int, str]] = {}
        self._cond = threading.Condition()
        self._waiters: set[tuple[asyncio.AbstractEventLoop, asyncio.Event]] = set()

    @property
    def held_bytes(self) -> int:
        with self._cond:
            return sum(size for size, _, _ in self._held.values())

    def held_by_kind(self) -> dict[str, int]:
        """The bytes held, by what holds them."""
        kinds: dict[str, int] = {}
        with self._cond:
            for size, _, kind in self._held.values():
                kinds[kind] = kinds.get(kind, 0) + size
        return kinds

    def held_words(self) -> str:
        """What the budget holds, in words for a refusal: '733 MB of request bodies and 2 MB of
        forward passes and answers' (what holds most first)."""
        kinds = sorted(self.held_by_kind().items(), key=lambda kind: -kind[1])
        parts = [f"{size / 2**20:,.0f} MB of {kind}" for kind, size in kinds]
        return " and ".join(parts) or "nothing"

    def reserve(self, key: Hashable, nbytes: int, kind: str = ANSWERS) -> Reservation:
        """Count `nbytes` for `key` (once, however many answers read it), or raise ServerBusy."""
        if nbytes > self.max_bytes:
            raise ServerBusy(
                f"this answer needs {nbytes / 2**20:,.0f} MB of forward-pass data in memory, "
                f"more than the {self.max_bytes / 2**20:,.0f} MB this server lets answers hold "
                "(ATLAS_INFLIGHT_BYTES); send a shorter text",
                retry_after=60,
            )
        deadline = time.monotonic() + self.wait_seconds
        with self._cond:
            while True:
                if key in self._held:
                    size, readers, kind = self._held[key]
                    self._held[key] = (size, readers + 1, kind)
                    return Reservation(self, key)
                in_use = sum(size for size, _, _ in self._held.values())
                if in_use + nbytes <= self.max_bytes:
                    self._held[key] = (nbytes, 1, kind)
                    return Reservation(self, key)
                if on_compute_thread():
                    raise NoRoomYet(self, nbytes)
                left = deadline - time.monotonic()
                if left <= 0:
                    raise self.busy(nbytes)
                self._cond.wait(left)

    def try_reserve(self, key: Hashable, nbytes: int, kind: str = ANSWERS) -> Reservation | None:
        """Count `nbytes` for `key` if they fit now, else None: never waits (beyond the lock's
        few instructions), so the event loop may call it (app.limits counts request bodies)."""
        with self._cond:
            if key in self._held:
                size, readers, kind = self._held[key]
                self._held[key] = (size, readers + 1, kind)
                return Reservation(self, key)
            in_use = sum(size for size, _, _ in self._held.values())
            if in_use + nbytes > self.max_bytes:
                return None
            self._held[key] = (nbytes, 1, kind)
            return Reservation(self, key)

    def busy(self, nbytes: int) -> ServerBusy:
        """The 503 for an answer that found no room for `nbytes` in time."""
        return ServerBusy(
            f"the server holds {self.held_words()} in flight, of the "
            f"{self.max_bytes / 2**20:,.0f} MB it lets them hold, and this answer needs "
            f"{nbytes / 2**20:,.0f} MB more; retry shortly",
            retry_after=max(1, math.ceil(self.wait_seconds)),
        )

    async def room_for(self, nbytes: int, seconds: float) -> bool:
        """Whether `nbytes` fit within `seconds` from now, off every compute lane; a
        reservation may still find them taken, and then asks again. Waiting costs the event
        loop nothing: each release wakes the waiters (_release), no one polls."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + seconds
        while self.held_bytes + nbytes > self.max_bytes:
            freed = asyncio.Event()
            waiter = (loop, freed)
            with self._cond:
                self._waiters.add(waiter)
            try:
                if self.held_bytes + nbytes <= self.max_bytes:  # freed before we listened
                    return True
                await asyncio.wait_for(freed.wait(), max(0.0, deadline - loop.time()))
            except asyncio.TimeoutError:
                return False
            finally:
                with self._cond:
                    self._waiters.discard(waiter)
        return True

    def _release(self, key: Hashable) -> None:
        with self._cond:
            size, readers, kind = self._held[key]
            if readers > 1:
                self._held[key] = (size, readers - 1, kind)
            else:
                del self._held[key]
            self._cond.notify_all()
            waiters = list(self._waiters)
        for loop, freed in waiters:  # room_for's, waiting on an event loop
            loop.call_soon_threadsafe(freed.set)
