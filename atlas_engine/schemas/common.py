"""Types shared by the API schemas."""

from __future__ import annotations

from typing import Annotated

from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict, Field
from pydantic_core import PydanticCustomError

from atlas_engine.errors import ErrorCode

FiniteFloat = Annotated[float, Field(allow_inf_nan=False)]
"""A JSON number that is neither NaN nor +-Infinity."""


def _json_integer(value: object) -> object:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise PydanticCustomError("int_type", "Input should be a valid integer")
    if isinstance(value, float):
        if not value.is_integer():
            raise PydanticCustomError(
                "int_from_float", "Input should be a whole number, without a fractional part"
            )
        return int(value)
    return value


def json_int(ge: int | None = None, le: int | None = None) -> object:
    """An integer as JSON Schema means it (3 or 3.0, never 3.5, "3" or true), in [ge, le].

    The bounds sit inside the type, before the validator, so the schema states them."""
    return Annotated[int, Field(ge=ge, le=le), BeforeValidator(_json_integer)]


Index = json_int(ge=0)
Seed = json_int(ge=0, le=2**31 - 1)

PositiveScale = Annotated[float, Field(gt=0, le=1e6, allow_inf_nan=False)]
"""A multiplier for q·k: a finite number in (0, 1e6]."""

WHITESPACE = (
    r"\t\n\x0b\f\r\x1c-\x1f \x85\xa0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000\ufeff"
)
"""Every character Python's str.isspace() or JavaScript's \\s calls whitespace, as regex escapes
that every engine (JSON Schema validators, browsers, Python's re, Rust's regex) reads alike, and
that read as text in the schema (the characters themselves show as blanks or boxes)."""
NOT_BLANK = f"[^{WHITESPACE}]"
"""JSON Schema pattern: the string holds at least one character that is not whitespace."""


class StrictModel(BaseModel):
    """A request body: JSON types exactly as the schema says (no "0" for 0, no true for 1),
    and unknown fields refused (a typo such as "head" for "heads" is an error, not a no-op).

    The examples of the fields its body's first example sets are that example's values: a
    client that builds a body from the fields' examples (schemathesis, a generated client) then
    sends one the route takes, never MiniLM (a field's example inherited from TextRequest) to a
    route that needs a head that predicts, or a corrupted text of another length than the clean
    text it is patched into."""

    model_config = ConfigDict(strict=True, extra="forbid")

    @classmethod
    def __get_pydantic_json_schema__(cls, core_schema, handler) -> dict:
        schema = handler(core_schema)
        found = handler.resolve_ref_schema(schema)
        fields, examples = found.get("properties", {}), found.get("examples") or [{}]
        for name, value in examples[0].items():
            if name in fields:
                fields[name]["examples"] = [value]
        return schema


def _distinct(values: list[int]) -> list[int]:
    seen: set[int] = set()
    for value in values:
        if value in seen:
            raise ValueError(f"repeats index {value}; list each index once")
        seen.add(value)
    return values


def index_list(max_items: int, what: str, omitted: str = "all when omitted.") -> object:
    """A non-empty list of distinct indices in [0, max_items): its schema says all three."""
    return Annotated[
        list[json_int(ge=0, le=max_items - 1)],
        Field(
            min_length=1,
            max_length=max_items,
            json_schema_extra={"uniqueItems": True},
            description=f"{what} (0-based, distinct, each below the model's count); {omitted}",
        ),
        AfterValidator(_distinct),
    ]


class Health(BaseModel):
    status: str = Field(examples=["ok"])
    corpus_store: str | None = Field(
        None,
        description="Only where the corpus store could not be read since the server started: "
        "it was moved aside (where to is said) and a new one starts empty",
    )


class ValidationIssue(BaseModel):
    loc: list[str]
    msg: str


class ErrorDetail(BaseModel):
    """Every error answer: a sentence a person can act on, a stable code, and for a 422 from
    validation, each field's issue. code 'input_rule' means the body fits the schema but breaks
    a rule JSON Schema cannot state (a ragged matrix, more tokens than the model takes, an index
    past the model's layer count); 'invalid_field' means it breaks the schema itself."""

    detail: str = Field(examples=["q: q is ragged: row 0 has 2 numbers but row 1 has 1"])
    code: ErrorCode
    errors: list[ValidationIssue] | None = None
