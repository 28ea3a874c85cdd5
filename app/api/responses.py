"""The error answers each route documents in OpenAPI: every status a route can give, with the
one body shape all errors share (ErrorDetail)."""

from __future__ import annotations

from pydantic import BaseModel

from app.errors import not_json_detail
from atlas_engine.schemas.common import ErrorDetail

_DESCRIPTIONS = {
    400: "The body is not UTF-8 JSON (or holds a number JSON parsers refuse).",
    404: "Unknown model; the message names the nearest ids, or lists them all.",
    408: "The request body was not whole within ATLAS_BODY_TIMEOUT_SECONDS of its head (code "
    "body_timeout), or the head did not arrive within it (head_timeout, answered by the server "
    "before any route).",
    413: "The request body is larger than ATLAS_MAX_BODY_BYTES.",
    415: "The body was sent without `Content-Type: application/json` (as text/plain, as a form, "
    "or with no Content-Type); the detail names the header to send.",
    422: "The body breaks its schema (code 'invalid_field') or a rule the schema cannot state "
    "(code 'input_rule', e.g. more tokens than the model takes); the detail says which, and "
    "`errors` gives each field's issue.",
    429: "Over the per-client rate limit, or this client already has its share of long jobs "
    "waiting for the compute lane; retry after the Retry-After header's seconds.",
    503: "The model cannot be loaded here (code 'model_unavailable', with the reason and the "
    "fix), or the server is busy (code 'busy', with Retry-After): its compute lane's queue is "
    "full, it is shutting down, it is sending other large answers, or it has no room for this "
    "request's body, which it did not read.",
}
_EXAMPLES = {  # one answer of each status as the server words it, with its code
    400: ("the body is not valid JSON (error at character 12)", "invalid_body"),
    404: (
        "Unknown model 'all-MiniLM-L6-v2'; did you mean 'sentence-transformers/all-MiniLM-L6-v2'?",
        "unknown_model",
    ),
    408: (
        "the request body was not whole within 20 s of its head; send it at once",
        "body_timeout",
    ),
    413: (
        "the request body is larger than 2,000,000 bytes; send less (the limit is "
        "ATLAS_MAX_BODY_BYTES)",
        "too_large",
    ),
    415: (not_json_detail("text/plain"), "unsupported_media_type"),
    422: ("head: unknown field; did you mean 'heads'?", "invalid_field"),
    429: ("too many requests: at most 600 a minute per client; retry in 1 s", "rate_limited"),
    503: (
        "'gpt2' is not in the local HuggingFace cache and Hub downloads are off. On a machine "
        "with internet run `huggingface-cli download gpt2` (...)",
        "model_unavailable",
    ),
}
_RETRY_AFTER = {"Retry-After": {"description": "Seconds to wait", "schema": {"type": "integer"}}}


def errors(*statuses: int, **descriptions: str) -> dict:
    """OpenAPI `responses` for these statuses; descriptions override by name, e.g. e422=...
    A status described as usual shows a real answer as its example (in /docs, a few lines
    instead of the schema's made-up example of every field); one described otherwise shows
    the schema's."""
    out = {}
    for status in statuses:
        description = descriptions.get(f"e{status}")
        entry: dict = {"model": ErrorDetail, "description": description or _DESCRIPTIONS[status]}
        if description is None:
            detail, code = _EXAMPLES[status]
            entry["content"] = {"application/json": {"example": {"detail": detail, "code": code}}}
        if status in (429, 503):
            entry["headers"] = _RETRY_AFTER
        out[status] = entry
    return out


BODY_ROUTE = (400, 408, 413, 415, 422, 429, 503)
"""Every route that reads a JSON body can answer these (503: no room for its body, or for its
job in a compute lane's queue)."""


def ndjson_lines(description: str, *line_models: type[BaseModel]) -> dict:
    """OpenAPI for a 200 answer streamed as NDJSON, one JSON object a line. OpenAPI 3.1 can only
    call such a body a string, so the schema of a line (one of line_models, told apart by their
    `event`) is given beside it in `x-line-schema`, as OpenAPI 3.2's `itemSchema` states it."""
    lines = []
    for model in line_models:
        schema = model.model_json_schema()
        if "$defs" in schema:  # its $refs would point at the document's root, not at itself
            raise ValueError(f"a line model must not nest models: {model.__name__}")
        lines.append(schema)
    return {
        "description": description,
        "content": {
            "application/x-ndjson": {
                "schema": {"type": "string"},
                "x-line-schema": {"oneOf": lines},
            }
        },
    }
