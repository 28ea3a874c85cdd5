"""Images in: an upload's bytes checked against every limit from its header alone, then decoded
into the RGB picture a vision model reads.

What is accepted, and why each limit is checked before a pixel is decoded:

- at most MAX_IMAGE_BYTES of body, and not empty;
- PNG, JPEG or WebP, as the file's own header says (Pillow identifies it; a file name or a
  Content-Type is never asked). A JPEG that Pillow reads as MPO (a camera's photo with a depth
  map or a second view after it) is a JPEG: its first image is the photo;
- width x height at most MAX_IMAGE_PIXELS, read from the header, so a small file that claims
  a huge picture (a decompression bomb) is refused before memory is taken for its pixels.
  Pillow's own bomb check (Image.MAX_IMAGE_PIXELS, left as it is: it is process-wide) is looser
  than ours; where it fires first, its error or warning is turned into ours;
- one frame: an animated PNG or WebP is refused rather than silently cut to its first frame;
- 8-bit pixels: modes 1, L, LA, P, RGB, RGBA, converted to RGB with any transparency laid on
  white. CMYK and the 16-bit, 32-bit and float modes are refused with what to do instead.

A truncated or corrupt file is refused (ImageFile.LOAD_TRUNCATED_IMAGES is never set). Every
refusal is an InvalidInput (a 422 whose detail names the limit and the value). Nothing is
written to disk: the bytes are read from memory.
"""

from __future__ import annotations

import io
import re
import struct
import zlib

from PIL import Image, ImageOps

from atlas_engine.errors import InvalidInput

MAX_IMAGE_BYTES = 10 * 1024 * 1024
"""The largest body accepted, in bytes (10 MiB)."""
MAX_IMAGE_PIXELS = 25_000_000
"""The most pixels (width x height, from the header) accepted: 25 megapixels."""
FORMATS = ("PNG", "JPEG", "WEBP")
"""The formats accepted, as Pillow names them."""
MODES = ("1", "L", "LA", "P", "RGB", "RGBA")
"""Pillow modes accepted: 8 bits per channel or fewer, converted to RGB."""

_REFUSED_MODES = {  # mode -> what it is, for the message
    "CMYK": "CMYK, for print",
    "I;16": "16-bit greyscale",
    "I;16B": "16-bit greyscale",
    "I;16L": "16-bit greyscale",
    "I;16N": "16-bit greyscale",
    "I": "32-bit integer greyscale",
    "F": "32-bit float greyscale",
}
_OTHER_FORMATS = (  # leading bytes -> format, only to name what was sent instead
    (b"GIF87a", "GIF"),
    (b"GIF89a", "GIF"),
    (b"BM", "BMP"),
    (b"II*\x00", "TIFF"),
    (b"MM\x00*", "TIFF"),
    (b"%PDF", "PDF"),
    (b"<svg", "SVG"),
    (b"<?xml", "XML (an SVG?)"),
)
_PILLOW_ERRORS = (OSError, SyntaxError, ValueError, EOFError, struct.error, zlib.error)
"""What Pillow raises for a file it cannot read (UnidentifiedImageError is an OSError)."""


def image_size(data: bytes) -> tuple[str, int, int]:
    """(format, width, height) of an image from its header alone: format one of FORMATS,
    width and height in pixels as stored (before any EXIF rotation). Every check that needs no
    pixels is made here (bytes, format, pixel count, frames, mode), so a request can be sized
    and refused before work; InvalidInput otherwise."""
    with _open_checked(data) as image:
        return _format_of(image), image.width, image.height


def decode_image(data: bytes) -> Image.Image:
    """The image in `data` as an RGB PIL image, upright: its EXIF orientation applied (6 or 8
    swap width and height). Transparent pixels are laid on white. Checked as image_size checks
    it before any pixel is decoded; a truncated or corrupt file is refused when decoded.
    InvalidInput for every refusal."""
    with _open_checked(data) as image:
        try:
            image.load()
            upright = ImageOps.exif_transpose(image)
            return _to_rgb(upright)
        except Image.DecompressionBombError as err:
            raise InvalidInput(_bomb_message(err)) from None
        except _PILLOW_ERRORS as err:
            raise InvalidInput(
                f"the {_format_of(image)} image is truncated or corrupt and cannot be decoded "
                f"({_reason(err)}); save it again and upload the new file"
            ) from None


def _open_checked(data: bytes) -> Image.Image:
    """The image opened lazily (header read, no pixels decoded), with every header check made."""
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise TypeError(f"expected the image's bytes, got {type(data).__name__}")
    size = len(data)
    if size == 0:
        raise InvalidInput("the image is empty (0 bytes): send the file's contents")
    if size > MAX_IMAGE_BYTES:
        raise InvalidInput(
            f"the image is {size:,} bytes ({size / 2**20:.1f} MiB), over the limit of "
            f"{MAX_IMAGE_BYTES:,} bytes ({MAX_IMAGE_BYTES / 2**20:.0f} MiB): save it smaller "
            "(a JPEG, or fewer pixels) and upload it again"
        )
    try:
        image = Image.open(io.BytesIO(data), formats=FORMATS)
    except Image.UnidentifiedImageError:
        head = bytes(data[:16])
        claimed = _accepted_signature(head)
        if claimed is not None:
            raise InvalidInput(
                f"the file starts as a {claimed} image but its header cannot be read: it is "
                "truncated or corrupt; save it again and upload the new file"
            ) from None
        raise InvalidInput(
            f"the file is {_sniff(head)}, not a PNG, JPEG or WebP image: "
            "save it as one of those and upload it again"
        ) from None
    except (Image.DecompressionBombError, Image.DecompressionBombWarning) as err:
        # Pillow's own check, made inside open, for images far over MAX_IMAGE_PIXELS (its
        # warning reaches here as an exception only where warnings are errors, as in the tests).
        raise InvalidInput(_bomb_message(err)) from None
    except _PILLOW_ERRORS as err:
        raise InvalidInput(
            f"the image's header cannot be read ({_reason(err)}): the file is truncated or "
            "corrupt; save it again and upload the new file"
        ) from None
    try:
        _check_header(image)
    except BaseException:
        image.close()
        raise
    return image


def _bomb_message(err: Exception) -> str:
    """Ours for Pillow's bomb error, with the pixel count its message gives where it does."""
    found = re.search(r"\((\d+) pixels\)", str(err))
    claimed = f"{int(found[1]):,} pixels" if found else "more pixels than can be decoded"
    return (
        f"the image's header claims {claimed}, over the limit of {MAX_IMAGE_PIXELS:,} pixels: "
        "refused as a possible decompression bomb; resize it and upload it again"
    )


def _check_header(image: Image.Image) -> None:
    width, height = image.size
    kind = _format_of(image)
    if width * height > MAX_IMAGE_PIXELS:
        raise InvalidInput(
            f"the {kind} image is {width:,} x {height:,} pixels "
            f"({width * height / 1e6:,.1f} megapixels), over the limit of "
            f"{MAX_IMAGE_PIXELS / 1e6:g} megapixels: resize it and upload it again"
        )
    if width == 0 or height == 0:
        raise InvalidInput(f"the {kind} image is {width} x {height} pixels: it has no pixels")
    frames = getattr(image, "n_frames", 1)
    if frames > 1 and image.format != "MPO":
        raise InvalidInput(
            f"the {kind} image is animated ({frames} frames); only still images are read: "
            "save the frame you want as a still PNG or JPEG"
        )
    if image.mode not in MODES:
        what = _REFUSED_MODES.get(image.mode, "not 8-bit RGB, greyscale or palette")
        raise InvalidInput(
            f"the {kind} image has mode {image.mode} ({what}), which is not read here: "
            "save it as 8-bit RGB and upload it again"
        )


def _to_rgb(image: Image.Image) -> Image.Image:
    """RGB, with any alpha channel or transparent palette entry composited on white."""
    if image.mode in ("LA", "RGBA") or "transparency" in image.info:
        rgba = image.convert("RGBA")
        white = Image.new("RGBA", rgba.size, (255, 255, 255, 255))
        white.alpha_composite(rgba)
        return white.convert("RGB")
    return image.convert("RGB")


def _format_of(image: Image.Image) -> str:
    return "JPEG" if image.format == "MPO" else str(image.format)


def _accepted_signature(head: bytes) -> str | None:
    """The accepted format whose signature `head` starts with, if any."""
    if head.startswith(b"\x89PNG\r\n\x1a\n"):
        return "PNG"
    if head.startswith(b"\xff\xd8\xff"):
        return "JPEG"
    if head[:4] == b"RIFF" and head[8:12] == b"WEBP":
        return "WebP"
    return None


def _sniff(head: bytes) -> str:
    """A name for what was sent instead of an image this module reads."""
    for magic, name in _OTHER_FORMATS:
        if head.startswith(magic):
            return f"a {name} file"
    if head[4:8] == b"ftyp":
        return "an HEIC/AVIF (ISO media) file"
    if all(byte >= 32 or byte in b"\t\n\r" for byte in head):
        return "text"
    return "of a type that is not recognised"


def _reason(err: BaseException) -> str:
    return str(err) or type(err).__name__
