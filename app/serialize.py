"""The one place where tensors become JSON-ready lists (and, for the model API, bytes)."""

from __future__ import annotations

import math

import torch
from torch import Tensor


def to_lists(t: Tensor, digits: int | None = None) -> list:
    """A float tensor as nested lists of Python floats, optionally rounded.

    Non-finite values are not valid JSON; use to_lists_with_nulls where they can occur.
    """
    values = t.detach().to(torch.float64).cpu()
    if digits is not None:
        values = values.round(decimals=digits)
    return values.tolist()


def to_lists_with_nulls(t: Tensor) -> list:
    """Like to_lists, but -inf, +inf and NaN become None (JSON null)."""
    def clean(x):
        if isinstance(x, list):
            return [clean(v) for v in x]
        return x if math.isfinite(x) else None

    return clean(to_lists(t))


def to_bool_lists(t: Tensor) -> list:
    return t.detach().bool().cpu().tolist()
