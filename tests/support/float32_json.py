"""Checks of JSON answers whose numbers are written as float32 (atlas_engine.serialize.json_with_float32):
the answer is its documented schema, fields in order, and every number is the shortest decimal
of its float32 (not float64's digits for it, 0.10000000149011612 for 0.1)."""

from __future__ import annotations

import numpy as np
from pydantic import BaseModel


def assert_answer_is(model: type[BaseModel], response) -> dict:
    """The response is `model` as JSON, its fields in the model's order; returns it parsed."""
    assert response.status_code == 200, response.text[:300]
    assert response.headers["content-type"] == "application/json"
    model.model_validate_json(response.content)
    answer = response.json()
    assert list(answer) == list(model.model_fields)
    return answer


def assert_float32_numbers(values) -> None:
    """Each number (nested lists of them) is the shortest decimal that reads back as its
    float32."""
    for value in np.asarray(values, dtype=np.float64).ravel():
        shortest = np.format_float_scientific(np.float32(value), unique=True)
        assert float(shortest) == value, value
