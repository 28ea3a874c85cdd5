"""Request bodies read as the API documents them: UTF-8 JSON, each key once in an object.

Starlette reads a body with `json.loads(bytes)`, which guesses the encoding (a UTF-8 byte order
mark, UTF-16 and UTF-32 were all accepted) and keeps the last of two equal keys, so a body could
mean one thing to a proxy or a logger that reads the first and another to the server. Every
APIRouter of the API takes `route_class=StrictJSONRoute`; its refusals are 400 `invalid_body`.
"""

from __future__ import annotations

import codecs
import json
from collections.abc import Callable, Coroutine
from typing import Any

from fastapi import Request, Response
from fastapi.routing import APIRoute
from starlette.exceptions import HTTPException

OTHER_ENCODINGS = (
    codecs.BOM_UTF32_LE,
    codecs.BOM_UTF32_BE,
    codecs.BOM_UTF16_LE,
    codecs.BOM_UTF16_BE,
)
SHOWN_KEY_CHARACTERS = 100


def not_utf8_json(why: str, fix: str = "send it as UTF-8") -> HTTPException:
    return HTTPException(400, f"the body is not UTF-8 JSON: {why}; {fix}")


def strict_json(body: bytes) -> Any:
    """The JSON value of `body`, read as UTF-8 with no byte order mark, each object's keys
    distinct; else HTTPException(400) saying which rule the body broke."""
    if body.startswith(codecs.BOM_UTF8):
        raise not_utf8_json("it starts with a byte order mark (EF BB BF)", "send it without one")
    if body.startswith(OTHER_ENCODINGS):
        raise not_utf8_json("it starts with a UTF-16 or UTF-32 byte order mark")
    if b"\0" in body:  # UTF-8 JSON never holds one; UTF-16 and UTF-32 JSON always do
        raise not_utf8_json("it holds NUL bytes, as UTF-16 and UTF-32 do")
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as err:
        raise not_utf8_json(f"byte {err.start} ({body[err.start]:#04x}) is not UTF-8") from None
    return json.loads(text, object_pairs_hook=_distinct_keys)


def _distinct_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    found = dict(pairs)
    if len(found) < len(pairs):
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                shown = json.dumps(key[:SHOWN_KEY_CHARACTERS], ensure_ascii=False)
                raise HTTPException(
                    400, f"the body has the key {shown} twice in one object; send each key once"
                )
            seen.add(key)
    return found


class StrictJSONRequest(Request):
    async def json(self) -> Any:
        if not hasattr(self, "_json"):
            self._json = strict_json(await self.body())
        return self._json


class StrictJSONRoute(APIRoute):
    """An APIRoute whose handler reads its JSON body with strict_json."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()

        async def strict_handler(request: Request) -> Response:
            return await handler(StrictJSONRequest(request.scope, request.receive))

        return strict_handler
