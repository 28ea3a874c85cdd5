"""A reference for deep-zoom overviews, computed the slow and obvious way from a whole map."""

import math

import torch


def block_pool(weights: torch.Tensor, cell: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(..., rows, cols) -> each cell x cell block's (max, mean); the last blocks may be short."""
    rows, cols = weights.shape[-2:]
    shape = (*weights.shape[:-2], math.ceil(rows / cell), math.ceil(cols / cell))
    out_max = torch.zeros(shape, dtype=weights.dtype)
    out_mean = torch.zeros_like(out_max)
    for a, r in enumerate(range(0, rows, cell)):
        for b, c in enumerate(range(0, cols, cell)):
            block = weights[..., r : r + cell, c : c + cell]
            out_max[..., a, b] = block.amax(dim=(-2, -1))
            out_mean[..., a, b] = block.mean(dim=(-2, -1))
    return out_max, out_mean
