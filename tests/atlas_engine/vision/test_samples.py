"""Issue 55.2: the bundled sample images are there, small, decodable and credited."""

import pytest

from atlas_engine.errors import NotFound
from atlas_engine.vision.images import decode_image, image_size
from atlas_engine.vision.samples import FOLDER, SAMPLES, sample_bytes


def test_every_sample_file_is_listed_and_every_listed_sample_is_there():
    files = {path.name for path in FOLDER.iterdir() if path.suffix in (".jpg", ".png")}
    assert files == {sample.file for sample in SAMPLES.values()}


@pytest.mark.parametrize("name", list(SAMPLES))
def test_each_sample_is_small_decodes_and_has_its_licence_quoted(name):
    sample = SAMPLES[name]
    data = sample_bytes(name)
    assert len(data) <= 200_000
    format, width, height = image_size(data)
    assert format == "JPEG" and max(width, height) <= 640
    assert decode_image(data).size == (width, height)  # no EXIF rotation
    assert sample.licence in ("public domain", "CC0")
    licences = (FOLDER / "LICENSES.md").read_text()
    assert f"## {sample.file} ({width} x {height})" in licences


def test_an_unknown_sample_is_not_found_with_the_names_there_are():
    with pytest.raises(NotFound, match="there is no sample image 'dog'; the samples are astronaut"):
        sample_bytes("dog")
