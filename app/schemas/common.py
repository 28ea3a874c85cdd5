"""Types shared by the API schemas."""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, Field

FiniteFloat = Annotated[float, Field(allow_inf_nan=False)]
"""A JSON number that is neither NaN nor +-Infinity."""


class Health(BaseModel):
    status: str = Field(examples=["ok"])


class ValidationIssue(BaseModel):
    loc: list[str]
    msg: str


class ErrorDetail(BaseModel):
    """Every error answer: a sentence a person can act on (plus, for 422, each field's issue)."""

    detail: str = Field(examples=["q: q is ragged: row 0 has 2 numbers but row 1 has 1"])
    errors: list[ValidationIssue] | None = None
