"""What a request body costs in memory once the server has parsed it, against its bytes.

    .venv/bin/python -m bench.body_cost [--bytes 2000000]

Each body goes to POST /api/attention through the whole app (FastAPI reads it, parses the JSON
and validates it; most are refused with 422 for a text over 32,767 characters, after all of
that). Printed: the peak of what Python allocated meanwhile (tracemalloc), and that peak as a
multiple of the body's bytes; app.limits.PARSED_BODY_FACTOR must stay above the largest.
"""

from __future__ import annotations

import argparse
import gc
import json
import tracemalloc

from fastapi.testclient import TestClient

from app.limits import PARSED_BODY_FACTOR
from app.main import create_app
from atlas_engine.config import Settings

PATH = "/api/attention"
OUTSIDE_THE_BMP = "\U0001f600"


def parse_cost(client: TestClient, body: bytes, path: str = PATH) -> int:
    """Peak bytes Python allocated while the app took `body` (read, parsed, validated, answered)."""
    gc.collect()
    tracemalloc.start()
    try:
        base = tracemalloc.get_traced_memory()[0]
        client.post(path, content=body, headers={"Content-Type": "application/json"})
        return tracemalloc.get_traced_memory()[1] - base
    finally:
        tracemalloc.stop()


def text_body(size: int, fill: str, last: str = "", escaped: bool = False) -> bytes:
    """About `size` bytes of {"model", "text"}: `fill` repeated, then `last`; UTF-8, or with
    every character past ASCII as \\u escapes."""
    one = len(json.dumps(fill, ensure_ascii=escaped)[1:-1].encode())
    text = fill * ((size - 40) // one) + last
    return json.dumps({"model": "x", "text": text}, ensure_ascii=escaped).encode()


def nested_lists(size: int, depth: int = 50) -> bytes:
    """About `size` bytes of {"model", "text": [[[...]]], ...}: lists `depth` deep, side by side,
    the costliest JSON found (each list holding one list is 88 bytes, for 2 bytes sent)."""
    item = "[" * depth + "]" * depth
    head = '{"model": "x", "text": ['
    return (head + ",".join([item] * ((size - len(head)) // (len(item) + 1))) + "]}").encode()


def bodies(size: int) -> dict[str, bytes]:
    return {
        "ASCII text": text_body(size, "a"),
        "ASCII text and one character outside the BMP": text_body(size, "a", OUTSIDE_THE_BMP),
        "the same, \\u-escaped": text_body(size, "a", OUTSIDE_THE_BMP, escaped=True),
        "characters outside the BMP (4 bytes each in UTF-8)": text_body(size, OUTSIDE_THE_BMP),
        "the same, \\u-escaped (12 bytes each)": text_body(size, OUTSIDE_THE_BMP, escaped=True),
        "lists nested 50 deep": nested_lists(size),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bytes", type=int, default=1_999_000)
    args = parser.parse_args()
    client = TestClient(create_app(Settings(preload=[], rate_limit_per_minute=0)))
    parse_cost(client, text_body(60, "a"))  # the first request's one-off allocations
    print(f"a request with a tiny body: {parse_cost(client, text_body(60, 'a')) / 1e3:,.0f} kB")
    print(f"| body | bytes | status | peak | x its bytes |  (factor {PARSED_BODY_FACTOR})")
    for name, body in bodies(args.bytes).items():
        status = client.post(PATH, content=body, headers={"Content-Type": "application/json"})
        cost = parse_cost(client, body)
        print(
            f"| {name} | {len(body):,} | {status.status_code} | {cost / 1e6:,.1f} MB "
            f"| {cost / len(body):.2f} |"
        )


if __name__ == "__main__":
    main()
