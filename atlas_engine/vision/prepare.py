"""An RGB image made into a vision model's input, and the picture the model sees.

The model's own image processor (transformers.AutoImageProcessor for its checkpoint folder)
does the work: resize, crop or pad, rescale, normalise. What the page shows is recovered from
its output by undoing the last two steps, so the picture drawn under the patch grid is exactly
the input, resized and cropped or padded as the model read it, not a second resize that might
differ from it.
"""

from __future__ import annotations

import io
from dataclasses import dataclass

import numpy as np
import torch
from PIL import Image


@dataclass(frozen=True)
class Prepared:
    """pixel_values: (1, 3, height, width) float32, what the processor gave; seen: (height,
    width, 3) uint8 RGB, the same pixels before rescaling and normalisation, to draw."""

    pixel_values: torch.Tensor
    seen: np.ndarray
    height: int
    width: int


def prepare(image: Image.Image, processor) -> Prepared:
    """The model's input for an RGB `image` and the picture it shows. `processor` is the
    checkpoint's transformers image processor, with the PIL backend (as vision.models loads it).

    seen = clip(round((pixel_values * std + mean) / rescale_factor), 0, 255), per channel,
    with only the steps the processor takes (do_normalize, do_rescale) undone. A PIL-backend
    processor resizes and pads whole grey levels, so re-normalising `seen` gives pixel_values
    back to within float32 rounding; a processor that resized in floating point would be
    within half a grey level, where nothing was clipped.
    """
    pixel_values = processor(images=image, return_tensors="pt")["pixel_values"]
    if pixel_values.ndim != 4 or pixel_values.shape[:2] != (1, 3):
        raise ValueError(
            f"expected the processor to give pixel values (1, 3, H, W), got "
            f"{tuple(pixel_values.shape)}"
        )
    pixel_values = pixel_values.to(torch.float32)
    values = pixel_values[0].numpy().astype(np.float64)  # (3, H, W)
    if getattr(processor, "do_normalize", False):
        values = values * _per_channel(processor.image_std) + _per_channel(processor.image_mean)
    if getattr(processor, "do_rescale", False):
        values = values / processor.rescale_factor
    seen = np.clip(np.rint(values), 0, 255).astype(np.uint8).transpose(1, 2, 0)  # (H, W, 3)
    _, _, height, width = pixel_values.shape
    return Prepared(pixel_values=pixel_values, seen=seen, height=height, width=width)


def png_bytes(seen: np.ndarray) -> bytes:
    """A PNG file of an (H, W, 3) uint8 RGB array, such as Prepared.seen."""
    if seen.ndim != 3 or seen.shape[2] != 3 or seen.dtype != np.uint8:
        raise ValueError(f"expected an (H, W, 3) uint8 array, got {seen.shape} {seen.dtype}")
    buffer = io.BytesIO()
    Image.fromarray(np.ascontiguousarray(seen)).save(buffer, format="PNG")
    return buffer.getvalue()


def _per_channel(value) -> np.ndarray:
    """A processor's mean or std (one number or one per channel) as (3, 1, 1)."""
    return np.broadcast_to(np.asarray(value, dtype=np.float64), (3,)).reshape(3, 1, 1)
