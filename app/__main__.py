"""`python -m app`: serve Attention Atlas with uvicorn, as `make run` and the Docker image do.

uvicorn's own proxy-header handling is switched off: by default it believes X-Forwarded-For
from 127.0.0.1, so any local client could pick its own address (and dodge the rate limit).
Forwarded headers are trusted only from ATLAS_TRUSTED_PROXIES, inside the app.

HTTP is parsed by h11 (app.transport), which refuses a request head it cannot bound (httptools,
uvicorn's faster parser, took a 1 MB header line: tests/e2e/test_transport_limits.py), and each
request head must arrive within ATLAS_BODY_TIMEOUT_SECONDS.
"""

from __future__ import annotations

import argparse
import os

import uvicorn

from app.config import get_settings
from app.transport import head_deadline_protocol


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m app", description=__doc__.splitlines()[0])
    parser.add_argument("--host", default=os.environ.get("HOST", "127.0.0.1"))
    parser.add_argument("--port", type=int, default=int(os.environ.get("PORT", "8000")))
    parser.add_argument("--log-level", default=os.environ.get("ATLAS_LOG_LEVEL", "info"))
    args = parser.parse_args(argv)
    uvicorn.run(
        "app.main:app",
        host=args.host,
        port=args.port,
        log_level=args.log_level,
        proxy_headers=False,
        server_header=False,
        http=head_deadline_protocol(get_settings().body_timeout_seconds),
    )


if __name__ == "__main__":
    main()
