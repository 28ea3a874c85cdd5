"""Make freed memory go back to the operating system, so the server's RSS follows its bounds.

glibc serves allocations below its mmap threshold from heap arenas and raises that threshold
(up to 32 MB) each time a large block is freed; attention maps of a few MB then come from the
heap, and freed ones stay in the process. Measured here with 12 clients that never read their
512-token SmolLM2 answers: 1.31 GB of RSS above the loaded models with glibc's defaults, 0.62 GB
(what the answers in flight really hold) with the threshold fixed at 1 MiB.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging

log = logging.getLogger("attention_atlas")

M_TRIM_THRESHOLD = -1
M_MMAP_THRESHOLD = -3
THRESHOLD_BYTES = 1 << 20


def return_freed_memory_to_the_os() -> bool:
    """Fix glibc's mmap and trim thresholds at 1 MiB; False where there is no glibc."""
    name = ctypes.util.find_library("c")
    if not name:
        return False
    try:
        libc = ctypes.CDLL(name)
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False  # not glibc (macOS, musl without mallopt): nothing to tune
    ok = mallopt(M_MMAP_THRESHOLD, THRESHOLD_BYTES) and mallopt(M_TRIM_THRESHOLD, THRESHOLD_BYTES)
    if not ok:
        log.warning("mallopt refused the memory thresholds; RSS may exceed the stated bound")
    return bool(ok)


WORKING_MARGIN_BYTES = 128 * 2**20
"""What the sum below leaves for the rest: one forward pass's per-layer temporaries, open
connections (at most ATLAS_MAX_CONNECTIONS) and Python objects. The bytes of answers being sent
are counted in the in-flight bytes (atlas_engine.serialize.held_while_sending for a streamed one, the
whole body for one built whole), and so are request bodies, parsed (app.limits.RequestBodyGuard)."""


def worst_case_rss(resident_with_models: int, forward_cache_bytes: int, inflight_bytes: int) -> int:
    """The server's memory bound: the process with its models loaded, plus every forward pass
    the cache may keep, plus every forward pass that answers in flight may hold outside the
    cache and every request body they and waiting requests hold, plus a working margin."""
    return resident_with_models + forward_cache_bytes + inflight_bytes + WORKING_MARGIN_BYTES


PROCESS_RSS = 512 * 2**20
"""The server's RSS with no model loaded: Python, PyTorch, transformers, the app and its
threads (measured: 422 MiB once started, 455 MiB after its pages, the model list and a
/api/core/attention answer)."""


def stated_bound(settings) -> int:
    """The bound docs/deployment.md states for these settings (atlas_engine.config.Settings):
    worst_case_rss with the process and every byte its models may hold (ATLAS_MODEL_BYTES,
    which the model manager keeps them to, each sized from its files before it loads, whatever
    model it is) as its first term."""
    return worst_case_rss(
        PROCESS_RSS + settings.model_bytes, settings.forward_cache_bytes, settings.inflight_bytes
    )
