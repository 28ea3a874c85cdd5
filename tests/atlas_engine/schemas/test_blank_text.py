"""The schema's "not blank" pattern (NOT_BLANK) calls whitespace exactly what Python's
str.isspace() or JavaScript's \\s does, in every engine that reads it (a browser's:
tests/e2e/test_api_docs.py), and reads as text."""

import re
from typing import Annotated

from pydantic import Field, TypeAdapter, ValidationError

from atlas_engine.models.registry import MINILM_ID
from atlas_engine.schemas.common import NOT_BLANK
from tests.support.whitespace import BLANKS, blank, every_char


def test_pythons_re_calls_blank_exactly_the_whitespace():
    pattern = re.compile(NOT_BLANK)
    assert [c for c in every_char() if pattern.search(c) is None] == BLANKS


def test_pydantics_rust_engine_reads_the_pattern_alike():
    adapter = TypeAdapter(Annotated[str, Field(pattern=NOT_BLANK)])
    for char in BLANKS:
        try:
            adapter.validate_python(char)
        except ValidationError:
            continue
        raise AssertionError(f"{char!r} passed as not blank")
    for char in every_char()[::997]:
        if not blank(char):
            assert adapter.validate_python(f"{char} ") == f"{char} "


def test_the_pattern_reads_as_text_in_the_schema(client):
    schema = client.get("/openapi.json").json()["components"]["schemas"]
    patterns = {
        spec["pattern"]
        for model in schema.values()
        for spec in model.get("properties", {}).values()
        if "pattern" in spec
    }
    assert NOT_BLANK in patterns
    assert all(p.isascii() and p.isprintable() for p in patterns), patterns


def test_a_text_of_any_whitespace_is_refused_with_422(client):
    for text in ("\u3000\u2028", "\x85\ufeff", "\x1c\xa0\u205f", "".join(BLANKS)):
        answer = client.post("/api/attention", json={"model": MINILM_ID, "text": text})
        assert answer.status_code == 422, (text, answer.text)
