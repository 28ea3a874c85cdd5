"""Two replicas behind nginx, round-robin against routing by the text's key, side by side.

    .venv/bin/python -m bench.replica_routing [--texts N] [--clients C]

Starts two replicas of the app (`python -m app`, MiniLM loaded) and Debian's nginx in front of
them twice: one port balancing round-robin, one hashing X-Atlas-Key (the key the page and the
client send: attention_atlas.client.route_key) with `hash ... consistent`, as
.ci/replicas-test.sh and deploy/kubernetes.yaml do. Each new text is asked what a page asks
for it (every layer's maps, every head's statistics, a head in depth, a token followed), by C
concurrent clients, and each answer's Server-Timing tells whether that replica ran a forward
pass for it. Each replica runs on one core of its own (taskset, one thread). Prints forward
passes per new text (goal: one) and requests a second for each configuration and for one
replica alone.
"""

from __future__ import annotations

import argparse
import json
import random
import subprocess
import sys
import tempfile
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from atlas_engine.models.registry import MINILM_ID
from attention_atlas.client import ROUTE_HEADER, route_key
from tests.support.live import free_port, start_server

WORDS = [
    "river",
    "stone",
    "light",
    "garden",
    "window",
    "paper",
    "music",
    "cloud",
    "letter",
    "bridge",
    "orange",
    "winter",
    "silver",
    "forest",
    "engine",
    "market",
    "teacher",
    "pocket",
    "candle",
    "island",
]
NGINX = """
worker_processes 1;
pid {work}/nginx.pid;
error_log {work}/nginx-error.log warn;
events {{ worker_connections 1024; }}
http {{
  access_log off;
  client_body_temp_path {work}/body; proxy_temp_path {work}/proxy;
  fastcgi_temp_path {work}/fastcgi; uwsgi_temp_path {work}/uwsgi; scgi_temp_path {work}/scgi;
  map $http_x_atlas_key $atlas_route {{ "" $request_id; default $http_x_atlas_key; }}
  upstream round_robin {{ {servers} keepalive 16; }}
  upstream by_text {{ hash $atlas_route consistent; {servers} keepalive 16; }}
  server {{ listen 127.0.0.1:{rr};
    location / {{ proxy_pass http://round_robin; proxy_http_version 1.1;
                 proxy_set_header Connection ""; }} }}
  server {{ listen 127.0.0.1:{hashed};
    location / {{ proxy_pass http://by_text; proxy_http_version 1.1;
                 proxy_set_header Connection ""; }} }}
}}
"""


def asks(text: str) -> list[tuple[str, dict]]:
    """What the explorer asks about a new text, as (path, body)."""
    base = {"model": MINILM_ID, "text": text}
    return [
        ("/api/attention", {**base, "format": "u8"}),
        ("/api/attention/heads", base),
        ("/api/attention/detail", {**base, "layer": 2, "head": 3}),
        ("/api/attention/token", {**base, "token": 1}),
    ]


def post(url: str, path: str, body: dict) -> bool:
    """Whether the replica that answered ran a forward pass for it."""
    request = urllib.request.Request(
        url + path, data=json.dumps(body).encode(), method="POST",
        headers={"Content-Type": "application/json", ROUTE_HEADER: route_key(body)},
    )  # fmt: skip
    with urllib.request.urlopen(request, timeout=120) as response:
        response.read()
        return "forward;" in (response.headers.get("Server-Timing") or "")


def load(url: str, texts: list[str], clients: int) -> tuple[float, float]:
    """(forward passes per new text, requests a second)."""
    jobs = [(path, body) for text in texts for path, body in asks(text)]
    random.Random(1).shuffle(jobs)  # a text's asks arrive mixed with other texts'
    began = time.perf_counter()
    with ThreadPoolExecutor(clients) as pool:
        passes = sum(pool.map(lambda job: post(url, *job), jobs))
    return passes / len(texts), len(jobs) / (time.perf_counter() - began)


def new_texts(n: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    return [" ".join(rng.choice(WORDS) for _ in range(40)) + f" ({seed}.{i})" for i in range(n)]


def run(texts: int, clients: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        # Each replica on a core of its own, as a cluster gives each pod its own cores.
        env = {"ATLAS_PRELOAD": f'["{MINILM_ID}"]', "OMP_NUM_THREADS": "1"}
        replicas = [
            start_server(
                work / f"replica{i}.log",
                env,
                ["taskset", "-c", str(i), sys.executable, "-m", "app"],
            )
            for i in range(2)
        ]
        rr, hashed = free_port(), free_port()
        servers = " ".join(f"server {r.base.removeprefix('http://')};" for r in replicas)
        (work / "nginx.conf").write_text(
            NGINX.format(work=work, servers=servers, rr=rr, hashed=hashed)
        )
        subprocess.run(["nginx", "-c", str(work / "nginx.conf"), "-p", str(work)], check=True)
        try:
            time.sleep(1)
            for replica in replicas:  # MiniLM loaded and warm on both
                load(replica.base, new_texts(2, 99), 2)
            print(f"{texts} new texts × {len(asks('x'))} requests, {clients} clients, MiniLM")
            rows = [
                ("one replica", replicas[0].base, 1),
                ("two, round-robin", f"http://127.0.0.1:{rr}", 2),
                ("two, by text key", f"http://127.0.0.1:{hashed}", 3),
            ]
            for name, url, seed in rows:
                passes, rate = load(url, new_texts(texts, seed), clients)
                print(f"  {name:<18} {passes:.2f} forward passes a text, {rate:6.1f} requests/s")
        finally:
            subprocess.run(["nginx", "-c", str(work / "nginx.conf"), "-p", str(work), "-s", "stop"])
            for replica in replicas:
                replica.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--texts", type=int, default=40)
    parser.add_argument("--clients", type=int, default=8)
    args = parser.parse_args()
    run(args.texts, args.clients)


if __name__ == "__main__":
    main()
