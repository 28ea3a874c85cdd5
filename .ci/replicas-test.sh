#!/usr/bin/env bash
# Prove that Attention Atlas scales by replicas, here on one machine: podman kube play runs
# deploy/kubernetes.yaml (its Deployment's 2 replicas, one pod each, each publishing its port on
# 127.0.0.1 only), Debian's nginx balances them on 127.0.0.1 with X-Forwarded-For (which the app
# believes only from the proxy's network, ATLAS_TRUSTED_PROXIES), and bench/load_test.py loads
# one replica alone, then both through nginx. Every load test and probe targets 127.0.0.1: never
# a pod's own address on podman's network. Prints throughput, p50/p99 and errors for each;
# removes what it made.
#
#   CPUS_PER_REPLICA=1  cores each replica may use (default 1, so that two replicas on this
#                       2-core machine have what a real cluster gives each pod: its own cores)
#   REPLICA_PORT=18081  the first replica's port on 127.0.0.1 (the second's is the next one)
#   LOAD_SECONDS=45 LOAD_CLIENTS=16
set -euo pipefail
cd "$(dirname "$0")/.."

IMAGE=localhost/attention-atlas:test
PROXY_PORT=${PROXY_PORT:-18080}
REPLICA_PORT=${REPLICA_PORT:-18081}
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
# podman runs a Deployment's replicas as pods that would all publish one host port, so its
# replicas become that many Deployments of one, the same pod template each, replica i publishing
# its port on 127.0.0.1:REPLICA_PORT+i alone (hostIP: nothing else on the host reaches it).
mapfile -t PORTS < <("$PY" - "$IMAGE" "$CPUS" "$REPLICA_PORT" "$WORK/kube.yaml" <<'PY'
import copy, sys, yaml
image, cpus, first_port, out = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
docs = [d for d in yaml.safe_load_all(open("deploy/kubernetes.yaml")) if d]
played = []
for doc in docs:
    if doc["kind"] != "Deployment":
        played.append(doc)
        continue
    container = doc["spec"]["template"]["spec"]["containers"][0]
    container["image"] = image
    container["imagePullPolicy"] = "Never"
    container["resources"]["limits"]["cpu"] = cpus
    container["resources"]["requests"]["cpu"] = cpus
    container["env"].append({"name": "ATLAS_RATE_LIMIT_PER_MINUTE", "value": "0"})
    for probe in ("readinessProbe", "livenessProbe"):  # as a number: podman's health check
        container[probe]["httpGet"]["port"] = 8000
    (port,) = container["ports"]
    for i in range(doc["spec"]["replicas"]):
        replica = copy.deepcopy(doc)
        replica["metadata"]["name"] = f"{doc['metadata']['name']}-{i}"
        replica["spec"]["replicas"] = 1
        published = {**port, "hostIP": "127.0.0.1", "hostPort": first_port + i}
        replica["spec"]["template"]["spec"]["containers"][0]["ports"] = [published]
        played.append(replica)
        print(first_port + i)
with open(out, "w") as f:
    yaml.safe_dump_all(played, f, sort_keys=False)
PY
)
[ "${#PORTS[@]}" = 2 ] || { echo "expected the manifest's 2 replicas, got ports: ${PORTS[*]}"; exit 1; }
podman kube play --replace "$WORK/kube.yaml" >/dev/null
mapfile -t CONTAINERS < <(podman ps --format '{{.Names}}' | grep -E 'attention-atlas.*atlas$')
[ "${#CONTAINERS[@]}" = 2 ] || { echo "expected 2 replicas, got: ${CONTAINERS[*]}"; podman ps -a; exit 1; }
for port in "${PORTS[@]}"; do
  for _ in $(seq 1 180); do curl -fsS "http://127.0.0.1:$port/api/health" >/dev/null 2>&1 && break; sleep 0.5; done
  grep -q '"ok"' <<< "$(curl -fsS "http://127.0.0.1:$port/api/health")"
done
step "2 replicas ready on 127.0.0.1: ${PORTS[*]}"

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
$(for port in "${PORTS[@]}"; do echo "    server 127.0.0.1:$port max_fails=2 fail_timeout=5s;"; done)
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
# peer it saw (127.0.0.1), which is the address the replica logs. A replica sees nginx's
# connections through its published port coming from podman's network (its gateway, in
# ATLAS_TRUSTED_PROXIES' 10.0.0.0/8), as an ingress's come from the pod network; 127.0.0.1 itself
# is not trusted, so the right-most address nginx did not add is the client's.
curl -fsS -H 'X-Forwarded-For: 203.0.113.99' "http://127.0.0.1:$PROXY_PORT/api/models" >/dev/null
sleep 1
logs=$(for c in "${CONTAINERS[@]}"; do podman logs "$c" 2>&1; done)
# Here-strings, not pipes: under pipefail, grep -q closing a pipe early fails the pipeline.
if grep -q '203.0.113.99' <<< "$logs"; then echo "a forged X-Forwarded-For was believed"; exit 1; fi
grep -q '127.0.0.1:0 - "GET /api/models' <<< "$logs" || { echo "the proxy's forwarded address was not used"; tail -5 <<< "$logs"; exit 1; }
step "forwarded addresses: proxy believed, forgery not"

echo "[replicas-test] load: $CLIENTS clients, $SECONDS_EACH s each, $CPUS core(s) per replica"
"$PY" -m bench.load_test --url "http://127.0.0.1:${PORTS[0]}" --clients "$CLIENTS" --seconds "$SECONDS_EACH" | tee "$WORK/one.txt"
"$PY" -m bench.load_test --url "http://127.0.0.1:$PROXY_PORT" --clients "$CLIENTS" --seconds "$SECONDS_EACH" | tee "$WORK/two.txt"
step "load tests"
one=$(grep -o '[0-9.]* requests/s' "$WORK/one.txt" | head -1 | cut -d' ' -f1)
two=$(grep -o '[0-9.]* requests/s' "$WORK/two.txt" | head -1 | cut -d' ' -f1)
echo "[replicas-test] throughput: one replica $one requests/s, two behind nginx $two requests/s"
echo "[replicas-test] passed"
