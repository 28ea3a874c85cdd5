"""Buffers reused from one block of a walk over a map to the next.

A walk over a long text's map a block of query rows at a time makes the same few large
temporaries for every block (a block's scores and weights: 4.7 MB for 16 rows of SmolLM2's 9
heads over 8,190 keys). A new tensor of that size is a fresh mapping from the operating system
(app.memory fixes glibc's mmap threshold at 1 MiB), whose pages are faulted in and zeroed again
for each block: measured on one layer's statistics at 8,190 tokens, 2.1 s with fresh tensors and
1.5 s with glibc reusing its heap. Taking them from a Scratch instead costs that once a walk.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor


class Scratch:
    """Named buffers, each grown to the largest shape asked of it and reused after.

    take(name, shape) returns a (shape) view of the buffer `name`, its contents undefined: a
    caller writes it before reading it, and must be done with it before taking the same name
    again (the next block's take overwrites it). One walk, one thread: never share one."""

    def __init__(self) -> None:
        self._buffers: dict[str, Tensor] = {}

    def take(
        self,
        name: str,
        shape: tuple[int, ...],
        dtype: torch.dtype = torch.float32,
        device: torch.device | str = "cpu",
    ) -> Tensor:
        """A view of `shape` (C order) on the buffer `name`, made or grown as needed."""
        size = math.prod(shape)
        device = torch.device(device)
        held = self._buffers.get(name)
        if held is None or held.numel() < size or held.dtype != dtype or held.device != device:
            held = torch.empty(size, dtype=dtype, device=device)
            self._buffers[name] = held
        return held[:size].view(shape)

    @property
    def nbytes(self) -> int:
        """Bytes the buffers hold now."""
        return sum(t.numel() * t.element_size() for t in self._buffers.values())
