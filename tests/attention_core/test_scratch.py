"""Scratch buffers: reused from one block of a walk to the next, and the walks that use them give
the numbers they gave with a new tensor for every block."""

import pytest
import torch

from attention_core.scratch import Scratch
from attention_core.tiles import row_weights


def test_a_buffer_is_reused_for_any_shape_that_fits_and_grown_for_one_that_does_not():
    scratch = Scratch()
    first = scratch.take("scores", (3, 4, 10))
    assert first.shape == (3, 4, 10) and first.is_contiguous()
    smaller = scratch.take("scores", (2, 7, 5))
    assert smaller.shape == (2, 7, 5) and smaller.data_ptr() == first.data_ptr()
    assert scratch.nbytes == 3 * 4 * 10 * 4
    larger = scratch.take("scores", (5, 5, 5))
    assert larger.data_ptr() != first.data_ptr()
    assert scratch.nbytes == 5 * 5 * 5 * 4
    other = scratch.take("weights", (2, 2))
    assert other.data_ptr() != larger.data_ptr()  # each name its own buffer
    as_double = scratch.take("weights", (2, 2), torch.float64)
    assert as_double.dtype == torch.float64 and as_double.data_ptr() != other.data_ptr()


@pytest.mark.parametrize("causal", [True, False])
def test_blocks_walked_with_one_scratch_equal_blocks_made_new(causal):
    """The statistics walk a long map from its last rows to its first with one scratch (the
    causal blocks shrink), and a walk may also go the other way (they grow): every block is
    bit for bit the block made without one, whatever the block before it left in the buffers."""
    g = torch.Generator().manual_seed(5)
    q = torch.randn(3, 50, 8, generator=g) * 3
    k = torch.randn(3, 50, 8, generator=g) * 3
    blocks = [(r0, min(r0 + 7, 50)) for r0 in range(0, 50, 7)]
    for order in (blocks[::-1], blocks):
        scratch = Scratch()
        for rows in order:
            kept = row_weights(q, k, rows, causal=causal, factor=0.3, scratch=scratch)
            new = row_weights(q, k, rows, causal=causal, factor=0.3)
            assert torch.equal(kept, new), rows
