# Shared by docker-test.sh and replicas-test.sh (source it): podman set up for this machine,
# a local Debian base image, and `build_image NAME` for the project's Dockerfile.
#
# The base image is made locally with debootstrap (no registry is reachable), pip reaches PyPI
# through the host's CA bundle, and CPU torch comes from the host's wheel folder. On a normal
# Docker host none of this is needed: `docker build -t attention-atlas .` is enough.

BASE=localhost/bookworm-python:latest
made_base=0
WORK=${WORK:-$(mktemp -d)}

step_start=$(date +%s)
step() { local now; now=$(date +%s); printf '[%s] %-40s %4ss\n' "$(basename "$0" .sh)" "$1" "$((now - step_start))"; step_start=$now; }

ensure_podman() {
  if ! command -v podman >/dev/null || ! command -v debootstrap >/dev/null; then
    if [ "$(id -u)" = 0 ]; then SUDO=; else SUDO=sudo; fi
    $SUDO apt-get update -qq
    $SUDO apt-get install -y -qq podman buildah debootstrap fuse-overlayfs uidmap runc >/dev/null
    step "installed podman"
  fi
  local limit
  limit=$(ulimit -Hn)
  cat > "$WORK/containers.conf" <<CONF
[containers]
default_ulimits = ["nofile=${limit}:${limit}", "nproc=32768:32768"]
[engine]
runtime = "runc"
CONF
  export CONTAINERS_CONF="$WORK/containers.conf"
}

ensure_base_image() {
  if ! podman image exists "$BASE"; then
    local mirror
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
}

build_image() {  # build_image NAME: the project's Dockerfile, from the local base image
  local build_args wheels
  build_args=(--format docker --build-arg BASE_IMAGE="$BASE" --build-arg TORCH_INDEX_URL=)
  if [ -f /etc/ssl/certs/ca-certificates.crt ]; then
    build_args+=(-v /etc/ssl/certs/ca-certificates.crt:/run/host-ca.crt:ro --build-arg PIP_CERT=/run/host-ca.crt)
  fi
  wheels=$(pip config list 2>/dev/null | sed -n "s/.*find-links='\(.*\)'/\1/p" | head -n1)
  if [ -n "$wheels" ] && [ -d "$wheels" ]; then
    build_args+=(-v "$wheels:/wheels:ro" --build-arg PIP_FIND_LINKS=/wheels)
  fi
  podman build "${build_args[@]}" -t "$1" . > "$WORK/build.log" 2>&1 || {
    tail -40 "$WORK/build.log"
    df -h / "$(podman info --format '{{.Store.GraphRoot}}' 2>/dev/null || echo /)" || true  # disk left
    return 1
  }
  step "built the image"
}

remove_base_image_if_made() {
  if [ "$made_base" = 1 ] && [ "${KEEP_BASE_IMAGE:-0}" != 1 ]; then podman rmi -f "$BASE" >/dev/null 2>&1 || true; fi
}
