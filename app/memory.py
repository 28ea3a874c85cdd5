"""Make freed memory go back to the operating system, so the server's RSS follows its bounds.

glibc serves allocations below its mmap threshold from heap arenas and raises that threshold
(up to 32 MB) each time a large block is freed; attention maps of a few MB then come from the
heap, and freed ones stay in the process. Measured here with 12 clients that never read their
512-token SmolLM2 answers: 1.31 GB of RSS above the loaded models with glibc's defaults, 0.62 GB
(what the answers in flight really hold) with the threshold fixed at 1 MiB.

A forward pass is the exception (tensors_reused_within): at 1 MiB each of its larger tensors
is a new mapping, faulted in page by page and unmapped when freed, so a 512-token MiniLM pass
took 150-168 ms against 109-132 ms with glibc's defaults (docs/performance.md). While a pass
with eager attention runs, the mmap threshold is 32 MiB, each layer reuses the heap memory the
layer before it freed, and afterwards the free pages inside the heaps go back (malloc_trim).
The same 12 clients: a peak of 1.25-1.31 GB against 1.17-1.18 GB (the working margin below
grew by 64 MiB for it).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from functools import cache

log = logging.getLogger("attention_atlas")

M_TRIM_THRESHOLD = -1
M_MMAP_THRESHOLD = -3
THRESHOLD_BYTES = 1 << 20
PASS_MMAP_THRESHOLD_BYTES = 32 << 20


@cache
def _glibc() -> ctypes.CDLL | None:
    """The C library where it is glibc (mallopt and malloc_trim), else None."""
    name = ctypes.util.find_library("c")
    if not name:
        return None
    try:
        libc = ctypes.CDLL(name)
        libc.mallopt, libc.malloc_trim  # noqa: B018 - both must be there
    except (OSError, AttributeError):
        return None  # not glibc (macOS, musl without mallopt): nothing to tune
    return libc


def return_freed_memory_to_the_os() -> bool:
    """Fix glibc's mmap and trim thresholds at 1 MiB; False where there is no glibc."""
    libc = _glibc()
    if libc is None:
        return False
    ok = libc.mallopt(M_MMAP_THRESHOLD, THRESHOLD_BYTES) and libc.mallopt(
        M_TRIM_THRESHOLD, THRESHOLD_BYTES
    )
    if not ok:
        log.warning("mallopt refused the memory thresholds; RSS may exceed the stated bound")
    return bool(ok)


_passes_running = 0
_passes_lock = threading.Lock()


@contextmanager
def tensors_reused_within(largest_tensor_bytes: int) -> Iterator[None]:
    """Inside the block (a forward pass whose largest tensor is about largest_tensor_bytes),
    blocks up to PASS_MMAP_THRESHOLD_BYTES come from the heap (any thread's: the threshold is
    the process's), so each layer reuses the memory the layer before it freed instead of
    mapping and faulting in every tensor afresh; when the
    last such block ends, the threshold is 1 MiB again and the free pages left inside the heaps
    go back to the system (malloc_trim, 0.2-1.3 ms: so a pass with no tensor over 1 MiB, which
    the threshold never touched, skips all this). Measured: a 512-token MiniLM pass 150-168 ->
    118-129 ms; a 512-token SmolLM2 pass 1,277 -> 850-952 ms."""
    global _passes_running
    libc = _glibc()
    if libc is None or largest_tensor_bytes < THRESHOLD_BYTES:
        yield
        return
    with _passes_lock:
        _passes_running += 1
        if _passes_running == 1:
            libc.mallopt(M_MMAP_THRESHOLD, PASS_MMAP_THRESHOLD_BYTES)
    try:
        yield
    finally:
        with _passes_lock:
            _passes_running -= 1
            last = _passes_running == 0
            if last:
                libc.mallopt(M_MMAP_THRESHOLD, THRESHOLD_BYTES)
        if last:  # outside the lock: a pass starting meanwhile need not wait for it
            libc.malloc_trim(0)


WORKING_MARGIN_BYTES = 192 * 2**20
"""What the sum below leaves for the rest: one forward pass's per-layer temporaries (and what the
heap holds of them while an eager pass reuses it: tensors_reused_within, which took the peak of
tests/e2e/test_memory_bound.py's first attack 70-135 MB higher, so the margin grew from 128 MiB),
request bodies and Python objects. The bytes of answers being sent are counted in the in-flight
bytes (app.serialize.held_while_sending for a streamed one, the whole body for one built
whole)."""


def worst_case_rss(resident_with_models: int, forward_cache_bytes: int, inflight_bytes: int) -> int:
    """The server's memory bound: the process with its models loaded (at most
    ATLAS_MAX_LOADED_MODELS of them), plus every forward pass the cache may keep, plus every
    forward pass that answers in flight may hold outside the cache, plus a working margin."""
    return resident_with_models + forward_cache_bytes + inflight_bytes + WORKING_MARGIN_BYTES


EMBEDDED_MODELS_RSS = 900 * 2**20
"""The server's RSS with both embedded models loaded (measured: 875 MB with MiniLM and
SmolLM2 after a warm-up, `python -m bench.load_test`); the first term of the sum for a
deployment that serves the embedded models."""
