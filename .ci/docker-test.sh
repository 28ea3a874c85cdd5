#!/usr/bin/env bash
# Build the Docker image with podman (no Docker engine here), run it, check that it serves,
# then remove what this script made. Prints the time each step took.
#
# How podman is set up and the image built here: .ci/podman-lib.sh.
#
#   KEEP_BASE_IMAGE=1  keep localhost/bookworm-python for the next run (saves ~1-2 minutes)
#   KEEP_IMAGE=1       keep the built image (replicas-test.sh reuses it)
set -euo pipefail
cd "$(dirname "$0")/.."

IMAGE=localhost/attention-atlas:test
NAME=attention-atlas-test-$$
PORT=${DOCKER_TEST_PORT:-18000}
# shellcheck source=podman-lib.sh
source .ci/podman-lib.sh

cleanup() {
  status=$?
  if [ "$status" != 0 ] && podman container exists "$NAME" 2>/dev/null; then
    echo "[docker-test] FAILED; the container's log:"
    podman logs --tail 40 "$NAME" 2>&1 || true
  fi
  podman rm -f "$NAME" >/dev/null 2>&1 || true
  [ "${KEEP_IMAGE:-0}" = 1 ] || podman rmi -f "$IMAGE" >/dev/null 2>&1 || true
  remove_base_image_if_made
  rm -rf "$WORK"
}
trap cleanup EXIT

ensure_podman
ensure_base_image
build_image "$IMAGE"
size=$(podman image inspect "$IMAGE" --format '{{.Size}}')
echo "[docker-test] image size: $((size / 1000000)) MB"

podman run -d --name "$NAME" -p "127.0.0.1:$PORT:8000" "$IMAGE" >/dev/null
for _ in $(seq 1 120); do
  if curl -fsS "http://127.0.0.1:$PORT/api/health" >/dev/null 2>&1; then break; fi
  sleep 0.5
done
curl -fsS "http://127.0.0.1:$PORT/api/health" -o "$WORK/health.json"
grep -q "\"ok\"" "$WORK/health.json"
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
curl -fsS "http://127.0.0.1:$PORT/" -o "$WORK/page.html"
grep -q "Attention Atlas" "$WORK/page.html"
curl -fsS "http://127.0.0.1:$PORT/docs" -o "$WORK/docs.html"
grep -q "swagger-ui" "$WORK/docs.html"
# Every script and stylesheet the pages name is served from the image (plotly.js and Swagger UI
# are vendored, not downloaded).
for src in $(cat "$WORK/page.html" "$WORK/docs.html" | grep -o '\(src\|href\)="[^"]*/static/[^"]*"' | cut -d'"' -f2 | sed 's|^https*://[^/]*||'); do
  curl -fsS "http://127.0.0.1:$PORT$src" -o /dev/null || { echo "[docker-test] $src is not served"; exit 1; }
done
step "real /api/attention requests, the pages and their files"
# The image model, converted at build time: a sample through it, as the unprivileged user.
curl -fsS "http://127.0.0.1:$PORT/api/image/samples/chelsea" -o "$WORK/cat.jpg"
curl -fsS -H "Content-Type: image/jpeg" --data-binary @"$WORK/cat.jpg" \
  "http://127.0.0.1:$PORT/api/image/attention?query=0" \
  | python3 -c "import json, sys; a = json.load(sys.stdin); assert (a['layers'], a['rows'], a['cols']) == (12, 16, 16), a['model']; print('[docker-test] image model:', a['model'], a['layers'], 'layers')"
step "an image through the vision transformer"

podman healthcheck run "$NAME"
step "podman healthcheck run"
echo "[docker-test] passed"
