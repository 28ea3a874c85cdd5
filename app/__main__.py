"""`python -m app`: serve Attention Atlas with uvicorn, as `make run` and the Docker image do.

uvicorn's own proxy-header handling is switched off: by default it believes X-Forwarded-For
from 127.0.0.1, so any local client could pick its own address (and dodge the rate limit).
Forwarded headers are trusted only from ATLAS_TRUSTED_PROXIES, inside the app.

HTTP is parsed by h11 (app.transport), which refuses a request head it cannot bound (httptools,
uvicorn's faster parser, took a 1 MB header line: tests/e2e/test_transport_limits.py), and each
request head must arrive within ATLAS_BODY_TIMEOUT_SECONDS.

On SIGTERM (Kubernetes, `docker stop`) the server stops within ATLAS_SHUTDOWN_GRACE_SECONDS: as
soon as uvicorn's shutdown starts, before it waits for open connections, the compute lanes are
told (atlas_engine.compute.begin_shutdown: a running pass stops at its next layer, waiting work and new
requests get 503), and connections still open after the grace are closed. Without this, uvicorn
waited for every open connection, however long its work ran (96 s for an 8,192-token pass).
"""

from __future__ import annotations

import argparse
import os
import socket

import uvicorn

from app.transport import head_deadline_protocol
from atlas_engine import compute
from atlas_engine.config import get_settings


class AtlasServer(uvicorn.Server):
    """uvicorn's server, which tells the compute lanes to stop as its shutdown begins: uvicorn
    runs the app's lifespan shutdown only after the wait for connections, too late for that."""

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        compute.begin_shutdown()
        await super().shutdown(sockets)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m app", description=__doc__.splitlines()[0])
    parser.add_argument("--host", default=os.environ.get("HOST", "127.0.0.1"))
    parser.add_argument("--port", type=int, default=int(os.environ.get("PORT", "8000")))
    parser.add_argument("--log-level", default=os.environ.get("ATLAS_LOG_LEVEL", "info"))
    args = parser.parse_args(argv)
    config = uvicorn.Config(
        "app.main:app",
        host=args.host,
        port=args.port,
        log_level=args.log_level,
        proxy_headers=False,
        server_header=False,
        http=head_deadline_protocol(get_settings().body_timeout_seconds, get_settings()),
        timeout_graceful_shutdown=get_settings().shutdown_grace_seconds,
    )
    AtlasServer(config).run()


if __name__ == "__main__":
    main()
