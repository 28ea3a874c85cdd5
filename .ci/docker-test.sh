#!/usr/bin/env bash
# Build the Docker image with podman (no Docker engine here), run it, check that it serves,
# then remove what this script made. Prints the time each step took.
#
# The base image is made locally with debootstrap (no registry is reachable), pip reaches PyPI
# through the host's CA bundle, and CPU torch comes from the host's wheel folder. On a normal
# Docker host none of this is needed: `docker build -t attention-atlas .` is enough.
#
#   KEEP_BASE_IMAGE=1  keep localhost/bookworm-python for the next run (saves ~1-2 minutes)
set -euo pipefail
cd "$(dirname "$0")/.."

IMAGE=localhost/attention-atlas:test
BASE=localhost/bookworm-python:latest
NAME=attention-atlas-test-$$
PORT=${DOCKER_TEST_PORT:-18000}
WORK=$(mktemp -d)
made_base=0

step_start=$(date +%s)
step() { local now; now=$(date +%s); printf '[docker-test] %-34s %4ss\n' "$1" "$((now - step_start))"; step_start=$now; }

cleanup() {
  status=$?
  if [ "$status" != 0 ] && podman container exists "$NAME" 2>/dev/null; then
    echo "[docker-test] FAILED; the container's log:"
    podman logs --tail 40 "$NAME" 2>&1 || true
  fi
  podman rm -f "$NAME" >/dev/null 2>&1 || true
  podman rmi -f "$IMAGE" >/dev/null 2>&1 || true
  if [ "$made_base" = 1 ] && [ "${KEEP_BASE_IMAGE:-0}" != 1 ]; then podman rmi -f "$BASE" >/dev/null 2>&1 || true; fi
  rm -rf "$WORK"
}
trap cleanup EXIT

if ! command -v podman >/dev/null || ! command -v debootstrap >/dev/null; then
  if [ "$(id -u)" = 0 ]; then SUDO=; else SUDO=sudo; fi
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq podman buildah debootstrap fuse-overlayfs uidmap runc >/dev/null
  step "installed podman"
fi

limit=$(ulimit -Hn)
cat > "$WORK/containers.conf" <<CONF
[containers]
default_ulimits = ["nofile=${limit}:${limit}", "nproc=32768:32768"]
[engine]
runtime = "runc"
CONF
export CONTAINERS_CONF="$WORK/containers.conf"

if ! podman image exists "$BASE"; then
  mirror=$(awk '/^URIs:/ {print $2; exit}' /etc/apt/sources.list.d/debian.sources 2>/dev/null || echo http://deb.debian.org/debian)
  debootstrap --variant=minbase --include=python3,python3-venv,python3-pip,ca-certificates \
    bookworm "$WORK/rootfs" "$mirror" >/dev/null
  : > "$WORK/rootfs/etc/resolv.conf"
  : > "$WORK/rootfs/etc/hostname"
  tar -C "$WORK/rootfs" -c . | podman import - "$BASE" >/dev/null
  rm -rf "$WORK/rootfs"
  made_base=1
  step "made the base image (debootstrap)"
fi

build_args=(--format docker --build-arg BASE_IMAGE="$BASE" --build-arg TORCH_INDEX_URL=)
if [ -f /etc/ssl/certs/ca-certificates.crt ]; then
  build_args+=(-v /etc/ssl/certs/ca-certificates.crt:/run/host-ca.crt:ro --build-arg PIP_CERT=/run/host-ca.crt)
fi
wheels=$(pip config list 2>/dev/null | sed -n "s/.*find-links='\(.*\)'/\1/p" | head -n1)
if [ -n "$wheels" ] && [ -d "$wheels" ]; then
  build_args+=(-v "$wheels:/wheels:ro" --build-arg PIP_FIND_LINKS=/wheels)
fi
podman build "${build_args[@]}" -t "$IMAGE" . > "$WORK/build.log" 2>&1 || { tail -40 "$WORK/build.log"; exit 1; }
step "built the image"
size=$(podman image inspect "$IMAGE" --format '{{.Size}}')
echo "[docker-test] image size: $((size / 1000000)) MB"

podman run -d --name "$NAME" -p "127.0.0.1:$PORT:8000" "$IMAGE" >/dev/null
for _ in $(seq 1 120); do
  if curl -fsS "http://127.0.0.1:$PORT/api/health" >/dev/null 2>&1; then break; fi
  sleep 0.5
done
curl -fsS "http://127.0.0.1:$PORT/api/health" | grep -q '"ok"'
step "container answers /api/health"

[ "$(podman exec "$NAME" id -u)" != 0 ] || { echo "the container runs as root"; exit 1; }
attention() {  # POST /api/attention, print the answer; fail loudly with the server's reason
  local out code
  out=$(curl -sS -o "$WORK/answer.json" -w '%{http_code}' "http://127.0.0.1:$PORT/api/attention" \
    -H 'Content-Type: application/json' -d "$1")
  code=$out
  if [ "$code" != 200 ]; then echo "[docker-test] /api/attention answered $code: $(cat "$WORK/answer.json")" >&2; return 1; fi
  cat "$WORK/answer.json"
}
attention '{"model": "sentence-transformers/all-MiniLM-L6-v2", "text": "The cat sat on the mat.", "layers": [0], "heads": [2]}' \
  | python3 -c "import json, sys; a = json.load(sys.stdin); assert a['tokens'][0] == '[CLS]' and len(a['attentions'][0][0]) == len(a['tokens']), a; print('[docker-test] MiniLM tokens:', a['tokens'])"
attention '{"model": "HuggingFaceTB/SmolLM2-135M-Instruct", "text": "One two three", "layers": [0], "heads": [0]}' \
  | python3 -c "import json, sys; a = json.load(sys.stdin); assert a['causal'] and a['num_kv_heads'] == 3, a; print('[docker-test] SmolLM2 tokens:', a['tokens'])"
curl -fsS "http://127.0.0.1:$PORT/" | grep -q "Attention Atlas"
step "real /api/attention requests"

podman healthcheck run "$NAME"
step "podman healthcheck run"
echo "[docker-test] passed"
