"""Issue 55.2: an upload is checked from its header before any pixel is decoded; every hostile
file gets an InvalidInput that names the problem, and good ones decode to upright RGB.

Every file here is made in memory with Pillow, or by hand where Pillow would refuse to write it
(a PNG header claiming 100000 x 100000 pixels).
"""

import io
import struct
import time
import tracemalloc
import warnings
import zlib

import numpy as np
import pytest
from PIL import Image

from atlas_engine.errors import InvalidInput
from atlas_engine.vision.images import (
    MAX_IMAGE_BYTES,
    MAX_IMAGE_PIXELS,
    decode_image,
    image_size,
)


def encoded(image: Image.Image, format: str, **options) -> bytes:
    buffer = io.BytesIO()
    image.save(buffer, format=format, **options)
    return buffer.getvalue()


def photo(width: int = 64, height: int = 48) -> Image.Image:
    """An RGB picture with detail everywhere, so that a cut file loses real data."""
    rng = np.random.default_rng(0)
    return Image.fromarray(rng.integers(0, 256, (height, width, 3), dtype=np.uint8))


def png_chunk(kind: bytes, body: bytes) -> bytes:
    return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))


def png_claiming(width: int, height: int) -> bytes:
    """A valid PNG header for an 8-bit RGB image of width x height, with one tiny IDAT: a few
    dozen bytes, whatever the size it claims."""
    ihdr = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)  # depth 8, colour type 2: RGB
    return (
        b"\x89PNG\r\n\x1a\n"
        + png_chunk(b"IHDR", ihdr)
        + png_chunk(b"IDAT", zlib.compress(b"\x00" * 16))
        + png_chunk(b"IEND", b"")
    )


def refused(data: bytes) -> str:
    """The message decode_image refuses `data` with."""
    with pytest.raises(InvalidInput) as caught:
        decode_image(data)
    return caught.value.message


def test_an_empty_body_is_refused():
    assert "empty (0 bytes)" in refused(b"")


def test_a_body_over_the_byte_limit_is_refused_before_it_is_opened():
    data = encoded(photo(), "PNG")
    oversized = data + b"\x00" * (MAX_IMAGE_BYTES + 1 - len(data))  # still a valid PNG
    message = refused(oversized)
    assert f"{MAX_IMAGE_BYTES + 1:,} bytes" in message
    assert f"limit of {MAX_IMAGE_BYTES:,} bytes (10 MiB)" in message


@pytest.mark.parametrize("format", ["GIF", "BMP", "TIFF"])
def test_another_image_format_is_refused_by_name(format):
    message = refused(encoded(photo(), format))
    assert f"a {format} file, not a PNG, JPEG or WebP image" in message


def test_a_text_file_named_like_an_image_is_refused_as_text():
    message = refused(b"name,score\nalice,3\nbob,4\n")
    assert message.startswith("the file is text, not a PNG, JPEG or WebP image")


def test_a_png_header_claiming_ten_billion_pixels_is_refused_fast_and_small():
    data = png_claiming(100_000, 100_000)
    assert len(data) < 100
    tracemalloc.start()
    started = time.perf_counter()
    try:
        message = refused(data)
        elapsed = time.perf_counter() - started
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert "header claims 10,000,000,000 pixels" in message
    assert f"limit of {MAX_IMAGE_PIXELS:,} pixels" in message and "decompression bomb" in message
    assert elapsed < 1.0, elapsed
    assert peak < 5_000_000, peak  # bytes: no buffer for the claimed pixels (30 GB of RGB)


def test_a_header_over_our_pixel_limit_but_under_pillows_is_refused_with_the_size():
    data = png_claiming(6_000, 5_000)  # 30 megapixels: Pillow's own check lets it through
    for read in (decode_image, image_size):
        with pytest.raises(InvalidInput) as caught:
            read(data)
        assert "6,000 x 5,000 pixels (30.0 megapixels)" in caught.value.message
        assert "limit of 25 megapixels" in caught.value.message


def test_pillows_bomb_warning_range_is_refused_whether_or_not_warnings_are_errors():
    data = png_claiming(10_000, 10_000)  # 100 megapixels: over Pillow's warning threshold
    assert Image.MAX_IMAGE_PIXELS < 100_000_000 < 2 * Image.MAX_IMAGE_PIXELS
    assert "header claims 100,000,000 pixels" in refused(data)  # pytest makes warnings errors
    with warnings.catch_warnings():  # as a server runs: the warning is only a warning
        warnings.simplefilter("ignore", Image.DecompressionBombWarning)
        assert "10,000 x 10,000 pixels (100.0 megapixels)" in refused(data)


@pytest.mark.parametrize("format", ["PNG", "JPEG"])
def test_a_truncated_file_is_refused_when_decoded(format):
    data = encoded(photo(), format)
    cut = data[: len(data) // 2]
    assert image_size(cut) == (format, 64, 48)  # its header is whole
    message = refused(cut)
    assert f"the {format} image is truncated or corrupt" in message


def test_a_png_with_a_damaged_header_is_refused():
    data = bytearray(encoded(photo(), "PNG"))
    data[20] ^= 0xFF  # inside IHDR: its CRC no longer matches
    message = refused(bytes(data))
    assert "starts as a PNG image but its header cannot be read" in message


def test_a_cmyk_jpeg_is_refused_saying_what_to_do():
    message = refused(encoded(Image.new("CMYK", (32, 32), (0, 255, 255, 0)), "JPEG"))
    assert "mode CMYK (CMYK, for print)" in message and "save it as 8-bit RGB" in message


def test_a_16_bit_png_is_refused_saying_what_to_do():
    depth16 = Image.fromarray(np.arange(32 * 32, dtype=np.uint16).reshape(32, 32) * 60)
    data = encoded(depth16, "PNG")
    with pytest.raises(InvalidInput) as caught:
        image_size(data)  # refused from the header alone
    assert "mode I;16 (16-bit greyscale)" in caught.value.message
    assert "save it as 8-bit RGB" in caught.value.message


@pytest.mark.parametrize("format", ["PNG", "WEBP"])
def test_an_animated_image_is_refused(format):
    frames = [Image.new("RGB", (16, 16), "red"), Image.new("RGB", (16, 16), "blue")]
    data = encoded(frames[0], format, save_all=True, append_images=frames[1:])
    assert f"the {format} image is animated (2 frames)" in refused(data)


def test_image_size_reads_the_header_of_each_accepted_format():
    for format in ("PNG", "JPEG", "WEBP"):
        assert image_size(encoded(photo(40, 30), format)) == (format, 40, 30)


@pytest.mark.parametrize(
    "image, format",
    [
        (photo(), "JPEG"),
        (photo(), "WEBP"),
        (photo().convert("L"), "PNG"),
        (photo().convert("1"), "PNG"),
        (photo().convert("P", palette=Image.Palette.ADAPTIVE, colors=16), "PNG"),
        (photo().convert("LA"), "PNG"),
    ],
    ids=["rgb-jpeg", "rgb-webp", "grey-png", "bilevel-png", "palette-png", "grey-alpha-png"],
)
def test_accepted_images_decode_to_rgb_of_their_size(image, format):
    decoded = decode_image(encoded(image, format))
    assert decoded.mode == "RGB" and decoded.size == (64, 48)
    if format == "PNG" and image.mode != "LA":  # lossless and opaque: the same colours
        np.testing.assert_array_equal(np.asarray(decoded), np.asarray(image.convert("RGB")))


def test_transparency_is_laid_on_white():
    rgba = Image.new("RGBA", (4, 1))
    rgba.putdata([(255, 0, 0, 255), (255, 0, 0, 0), (0, 0, 255, 128), (0, 0, 0, 0)])
    decoded = decode_image(encoded(rgba, "PNG"))
    assert decoded.mode == "RGB"
    pixels = np.asarray(decoded)[0].tolist()
    assert pixels[0] == [255, 0, 0] and pixels[1] == [255, 255, 255]
    assert pixels[3] == [255, 255, 255]
    assert pixels[2][2] == 255 and 126 <= pixels[2][0] <= 128  # half blue over white


def test_a_transparent_palette_entry_is_laid_on_white():
    palette = Image.new("P", (2, 1))
    palette.putpalette([0, 0, 0, 0, 128, 0])  # index 0 black, 1 green
    palette.putdata([0, 1])
    decoded = decode_image(encoded(palette, "PNG", transparency=0))
    assert np.asarray(decoded).tolist() == [[[255, 255, 255], [0, 128, 0]]]


def test_exif_orientation_6_is_applied():
    """Orientation 6: the stored image is shown turned 90 degrees clockwise, so its left half
    becomes the top half."""
    stored = Image.new("RGB", (40, 30), (0, 0, 255))
    stored.paste((255, 0, 0), (0, 0, 20, 30))  # left half red, right half blue
    exif = Image.Exif()
    exif[0x0112] = 6  # Orientation
    data = encoded(stored, "JPEG", exif=exif, quality=95)
    assert image_size(data) == ("JPEG", 40, 30)  # as stored
    upright = decode_image(data)
    assert upright.size == (30, 40)
    top, bottom = upright.getpixel((15, 5)), upright.getpixel((15, 35))
    assert top[0] > 200 and top[2] < 60, top
    assert bottom[2] > 200 and bottom[0] < 60, bottom
