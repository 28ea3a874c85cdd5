#!/usr/bin/env bash
# Prove that Attention Atlas scales by replicas, here on one machine: podman kube play runs
# deploy/kubernetes.yaml (a Deployment of 2 replicas: one pod each), Debian's nginx balances
# them on 127.0.0.1 with X-Forwarded-For (which the app believes only from the proxy's
# network, ATLAS_TRUSTED_PROXIES), and bench/load_test.py loads one replica alone, then both
# through nginx. Prints throughput, p50/p99 and errors for each; removes what it made.
#
#   CPUS_PER_REPLICA=1  cores each replica may use (default 1, so that two replicas on this
#                       2-core machine have what a real cluster gives each pod: its own cores)
#   LOAD_SECONDS=45 LOAD_CLIENTS=16
set -euo pipefail
cd "$(dirname "$0")/.."

IMAGE=localhost/attention-atlas:test
PROXY_PORT=${PROXY_PORT:-18080}
CPUS=${CPUS_PER_REPLICA:-1}
SECONDS_EACH=${LOAD_SECONDS:-45}
CLIENTS=${LOAD_CLIENTS:-16}
PY=${PY:-.venv/bin/python}
# shellcheck source=podman-lib.sh
source .ci/podman-lib.sh

cleanup() {
  [ -f "$WORK/nginx.pid" ] && kill "$(cat "$WORK/nginx.pid")" 2>/dev/null || true
  podman kube down "$WORK/kube.yaml" >/dev/null 2>&1 || true
  [ "${KEEP_IMAGE:-0}" = 1 ] || podman rmi -f "$IMAGE" >/dev/null 2>&1 || true
  remove_base_image_if_made
  rm -rf "$WORK"
}
trap cleanup EXIT

ensure_podman
command -v nginx >/dev/null || { apt-get update -qq && apt-get install -y -qq nginx >/dev/null; step "installed nginx"; }
if ! podman image exists "$IMAGE"; then
  ensure_base_image
  build_image "$IMAGE"
fi

# The manifest as shipped, pointed at the local image, with each replica's CPU limited and the
# rate limit off (every load-test client comes from 127.0.0.1 here; a class has many addresses).
"$PY" - "$IMAGE" "$CPUS" > "$WORK/kube.yaml" <<'PY'
import sys, yaml
image, cpus = sys.argv[1], sys.argv[2]
docs = [d for d in yaml.safe_load_all(open("deploy/kubernetes.yaml")) if d]
for doc in docs:
    if doc["kind"] == "Deployment":
        container = doc["spec"]["template"]["spec"]["containers"][0]
        container["image"] = image
        container["imagePullPolicy"] = "Never"
        container["resources"]["limits"]["cpu"] = cpus
        container["resources"]["requests"]["cpu"] = cpus
        container["env"].append({"name": "ATLAS_RATE_LIMIT_PER_MINUTE", "value": "0"})
        # podman publishes each containerPort on the host, so two replicas would collide;
        # nginx reaches each pod on its own address instead, as a Service would.
        container.pop("ports")
        for probe in ("readinessProbe", "livenessProbe"):
            container[probe]["httpGet"]["port"] = 8000
print(yaml.safe_dump_all(docs, sort_keys=False))
PY
podman kube play --replace "$WORK/kube.yaml" >/dev/null
mapfile -t CONTAINERS < <(podman ps --format '{{.Names}}' | grep -E 'attention-atlas.*atlas$')
[ "${#CONTAINERS[@]}" = 2 ] || { echo "expected 2 replicas, got: ${CONTAINERS[*]}"; podman ps -a; exit 1; }
ADDRESSES=()
for c in "${CONTAINERS[@]}"; do
  ip=$(podman inspect "$c" --format '{{range .NetworkSettings.Networks}}{{.IPAddress}}{{end}}')
  [ -n "$ip" ] || ip=$(podman inspect "$c" --format '{{.NetworkSettings.IPAddress}}')
  ADDRESSES+=("$ip")
done
for ip in "${ADDRESSES[@]}"; do
  for _ in $(seq 1 180); do curl -fsS "http://$ip:8000/api/health" >/dev/null 2>&1 && break; sleep 0.5; done
  grep -q '"ok"' <<< "$(curl -fsS "http://$ip:8000/api/health")"
done
step "2 replicas ready: ${ADDRESSES[*]}"

cat > "$WORK/nginx.conf" <<CONF
worker_processes 1;
pid $WORK/nginx.pid;
error_log $WORK/nginx-error.log warn;
events { worker_connections 1024; }
http {
  access_log off;
  client_body_temp_path $WORK/body; proxy_temp_path $WORK/proxy;
  fastcgi_temp_path $WORK/fastcgi; uwsgi_temp_path $WORK/uwsgi; scgi_temp_path $WORK/scgi;
  # A request about a text carries X-Atlas-Key (from the page and the Python client): every
  # request about one text goes to the replica that has its forward pass cached; a request
  # naming no text spreads by its request id.
  map \$http_x_atlas_key \$atlas_route { "" \$request_id; default \$http_x_atlas_key; }
  upstream atlas {
    hash \$atlas_route consistent;
$(for ip in "${ADDRESSES[@]}"; do echo "    server $ip:8000 max_fails=2 fail_timeout=5s;"; done)
    keepalive 32;
  }
  server {
    listen 127.0.0.1:$PROXY_PORT;
    client_max_body_size 1m;
    location / {
      proxy_pass http://atlas;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
      proxy_set_header Host \$host;
      proxy_set_header X-Forwarded-For \$proxy_add_x_forwarded_for;
      proxy_set_header X-Forwarded-Proto \$scheme;
      proxy_read_timeout 300s;
    }
  }
}
CONF
nginx -c "$WORK/nginx.conf" -p "$WORK"
for _ in $(seq 1 40); do curl -fsS "http://127.0.0.1:$PROXY_PORT/api/health" >/dev/null 2>&1 && break; sleep 0.25; done
step "nginx balancing on 127.0.0.1:$PROXY_PORT"

# The proxy's X-Forwarded-For is believed, a client's forged one is not: nginx appends the
# peer it saw (127.0.0.1), which is the address the replica logs.
curl -fsS -H 'X-Forwarded-For: 203.0.113.99' "http://127.0.0.1:$PROXY_PORT/api/models" >/dev/null
sleep 1
logs=$(for c in "${CONTAINERS[@]}"; do podman logs "$c" 2>&1; done)
# Here-strings, not pipes: under pipefail, grep -q closing a pipe early fails the pipeline.
if grep -q '203.0.113.99' <<< "$logs"; then echo "a forged X-Forwarded-For was believed"; exit 1; fi
grep -q '127.0.0.1:0 - "GET /api/models' <<< "$logs" || { echo "the proxy's forwarded address was not used"; tail -5 <<< "$logs"; exit 1; }
step "forwarded addresses: proxy believed, forgery not"

echo "[replicas-test] load: $CLIENTS clients, $SECONDS_EACH s each, $CPUS core(s) per replica"
"$PY" -m bench.load_test --url "http://${ADDRESSES[0]}:8000" --clients "$CLIENTS" --seconds "$SECONDS_EACH" | tee "$WORK/one.txt"
"$PY" -m bench.load_test --url "http://127.0.0.1:$PROXY_PORT" --clients "$CLIENTS" --seconds "$SECONDS_EACH" | tee "$WORK/two.txt"
step "load tests"
one=$(grep -o '[0-9.]* requests/s' "$WORK/one.txt" | head -1 | cut -d' ' -f1)
two=$(grep -o '[0-9.]* requests/s' "$WORK/two.txt" | head -1 | cut -d' ' -f1)
echo "[replicas-test] throughput: one replica $one requests/s, two behind nginx $two requests/s"
echo "[replicas-test] passed"
