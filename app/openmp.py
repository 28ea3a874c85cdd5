"""How long the server's idle OpenMP threads spin: set before PyTorch is loaded.

PyTorch's CPU kernels run on libgomp, whose helper threads, when a parallel region ends, spin
for GOMP_SPINCOUNT iterations (300,000 by default) in case another region comes before they
sleep. On this machine (2 cores) that is 7-10 ms of one core after every forward pass of the
heavy lane (bench/threads.py), and those are the milliseconds in which the pass's answer is
coded and sent and the next request read: on two cores they had one. SPIN_COUNT (under 1 ms
here) still spans the gaps between one pass's kernels, which come microseconds apart.

libgomp reads the variable once, when it is loaded (with torch), so `python -m app` calls
spin_briefly() before importing anything that imports torch; an operator's own GOMP_SPINCOUNT
or OMP_WAIT_POLICY is left as it is. This module imports nothing of the app's.
"""

from __future__ import annotations

import os
from collections.abc import MutableMapping

SPIN_COUNT = 30_000
OPERATOR_SETTINGS = ("GOMP_SPINCOUNT", "OMP_WAIT_POLICY")


def spin_briefly(environ: MutableMapping[str, str] = os.environ) -> None:
    """Give libgomp a spin of SPIN_COUNT iterations unless the environment chose one already.
    Takes effect only in a process that has not loaded torch yet."""
    if not any(name in environ for name in OPERATOR_SETTINGS):
        environ["GOMP_SPINCOUNT"] = str(SPIN_COUNT)
