"""Start a real uvicorn server in a subprocess, the way `make run` does, for tests that need one."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


# Beside another test process (make test's pytest-xdist workers) the cores are shared, and a
# heavy lane at nice +10 gets a tenth of a contended core (docs/deployment.md, "Cores"): the
# schema fuzz then ran out of its 540 s. As that page advises for a shared host, nice 0 there;
# the `alone` files run without a neighbour, at the default.
SHARED_HOST = {"ATLAS_HEAVY_LANE_NICE": "0"} if os.environ.get("PYTEST_XDIST_WORKER") else {}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def rss_bytes(pid: int) -> int:
    """Resident memory of a process, from /proc."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError(f"no VmRSS for pid {pid}")


@dataclass
class LiveServer:
    base: str
    process: subprocess.Popen
    log_path: Path
    log_file: object

    @property
    def port(self) -> int:
        return int(self.base.rsplit(":", 1)[1])

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        self.log_file.close()


def start_server(
    log_path: Path, env: dict[str, str] | None = None, command: list[str] | None = None
) -> LiveServer:
    """uvicorn app.main:app on a free loopback port, started as `make run` starts it (or by
    `command`, which must take --host and --port), with these extra ATLAS_* settings; returns
    once /api/health answers."""
    port = free_port()
    full_env = {
        **os.environ,
        "HF_HUB_OFFLINE": "1",
        "ATLAS_PRELOAD": "[]",
        "ATLAS_CACHE_DIR": str(REPO / "var" / "cache"),
        "ATLAS_RATE_LIMIT_PER_MINUTE": "0",
        **SHARED_HOST,
        **(env or {}),
    }
    log = log_path.open("wb")
    process = subprocess.Popen(
        [*(command or [sys.executable, "-m", "app"]), "--host", "127.0.0.1", "--port", str(port)],
        cwd=REPO,
        env=full_env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    server = LiveServer(f"http://127.0.0.1:{port}", process, log_path, log)
    deadline = time.monotonic() + 60
    while True:
        try:
            with urllib.request.urlopen(f"{server.base}/api/health", timeout=2) as r:
                if r.status == 200:
                    return server
        except OSError:
            if process.poll() is not None or time.monotonic() > deadline:
                server.stop()
                raise RuntimeError(f"the server did not start:\n{server.log()[-3000:]}") from None
            time.sleep(0.2)
