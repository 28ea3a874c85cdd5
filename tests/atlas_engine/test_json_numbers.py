"""JSON answers built from tensors (atlas_engine.serialize.to_lists): a float32 value is written as the
shortest decimal that reads back as exactly that float32; a float64 value keeps its own digits."""

import json

import torch

from atlas_engine.serialize import to_lists, to_lists_with_nulls
from tests.support.float32_json import assert_float32_numbers

EDGES = [0.1, 1 / 3, 1e-30, 1.4e-45, 3.4028235e38, -2.5, 0.0, -0.0, 1.0]


def test_float32_values_are_their_shortest_decimals_and_read_back_exactly():
    t = torch.cat([torch.rand(40) * 2 - 1, torch.tensor(EDGES)]).reshape(7, 7)
    written = to_lists(t)
    assert torch.equal(torch.tensor(written, dtype=torch.float32), t)
    assert_float32_numbers(written)
    assert written[5][5] == 0.1  # EDGES[0], not 0.10000000149011612
    # about half the characters of float64's digits for the same values
    assert len(json.dumps(written)) < 0.7 * len(json.dumps(t.double().tolist()))


def test_half_precision_values_read_back_as_themselves():
    for dtype in (torch.float16, torch.bfloat16):
        t = torch.tensor([[0.1, -3.0], [1e-3, 7.25]], dtype=dtype)
        assert torch.equal(torch.tensor(to_lists(t), dtype=dtype), t)


def test_float64_values_keep_their_digits_and_rounding_is_as_asked():
    t = torch.tensor([[0.1, 1 / 3]], dtype=torch.float64)
    assert to_lists(t) == [[0.1, 1 / 3]]
    assert to_lists(t.float(), digits=3) == [[0.1, 0.333]]


def test_a_scalar_and_an_empty_tensor():
    assert to_lists(torch.tensor(0.1)) == 0.1
    assert to_lists(torch.zeros(0, 3)) == []


def test_non_finite_values_are_null_where_nulls_are_asked_for():
    inf, nan = float("inf"), float("nan")
    for dtype in (torch.float32, torch.float64):
        t = torch.tensor([[-inf, 0.1], [nan, inf]], dtype=dtype)
        assert to_lists_with_nulls(t) == [[None, 0.1], [None, None]]
    assert to_lists(torch.tensor([inf, 0.5])) == [inf, 0.5]  # as before: the caller's to handle
