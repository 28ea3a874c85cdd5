"""Streamed (NDJSON) answers, read and held to the line schemas their route documents."""

import json

import jsonschema


def documented_lines(client, path: str) -> list[dict]:
    """The schemas a line of this POST route's 200 answer may have (its `x-line-schema`)."""
    answer = client.get("/openapi.json").json()["paths"][path]["post"]["responses"]["200"]
    return answer["content"]["application/x-ndjson"]["x-line-schema"]["oneOf"]


def checked_lines(client, path: str, response) -> list[dict]:
    """The answer's lines, each valid against exactly one of the route's documented schemas."""
    schemas = documented_lines(client, path)
    lines = [json.loads(line) for line in response.text.splitlines() if line.strip()]
    for line in lines:
        matches = [s["title"] for s in schemas if jsonschema.Draft202012Validator(s).is_valid(line)]
        assert len(matches) == 1, (line, matches)
    return lines
