"""The sample photos that ship with Atlas, for trying the image views without an upload.

Each is a photograph from scikit-image 0.26.0's `skimage/data` folder whose licence allows
redistribution: public domain or CC0, as that package's own docstrings state
(LICENSES.md in this folder quotes them). Each has one clear object (a person, a cat, a cup,
a rocket), where a DINO-style model's heads can be seen to outline it. Each is at most 640 px
on its long side, so the model's resize to 224 px is the only one.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from atlas_engine.errors import NotFound

FOLDER = Path(__file__).resolve().parent


@dataclass(frozen=True)
class Sample:
    file: str  # in this folder
    title: str
    credit: str
    licence: str
    why_chosen: str

    @property
    def path(self) -> Path:
        return FOLDER / self.file


SAMPLES: dict[str, Sample] = {
    "astronaut": Sample(
        file="astronaut.jpg",
        title="Astronaut Eileen Collins",
        credit="NASA (NASA Great Images database), via scikit-image",
        licence="public domain",
        why_chosen="a person in an orange suit, with a flag, a model shuttle and a helmet "
        "around her: several objects for the heads to tell apart",
    ),
    "chelsea": Sample(
        file="chelsea.jpg",
        title="Chelsea the cat",
        credit="Stefan van der Walt, via scikit-image",
        licence="CC0",
        why_chosen="a cat's face filling the frame: the kind of picture where DINO's heads "
        "are known to outline an animal",
    ),
    "coffee": Sample(
        file="coffee.jpg",
        title="A cup of espresso",
        credit="Rachel Michetti, courtesy of Pikolo Espresso Bar, via scikit-image",
        licence="CC0",
        why_chosen="a cup, saucer and spoon on a wooden table: round outlines that are easy "
        "to check by eye against a head's map",
    ),
    "rocket": Sample(
        file="rocket.jpg",
        title="Falcon 9 and DSCOVR on the launch pad",
        credit="SpaceX, via scikit-image",
        licence="public domain",
        why_chosen="a thin rocket between lightning towers against a dusk sky: a small "
        "object among look-alikes, unlike the cat and the cup",
    ),
}
"""Sample name -> Sample, in the order the page lists them."""


def sample_bytes(name: str) -> bytes:
    """The file's bytes of the sample `name`; NotFound listing the samples there are."""
    sample = SAMPLES.get(name)
    if sample is None:
        raise NotFound(f"there is no sample image {name!r}; the samples are {', '.join(SAMPLES)}")
    return sample.path.read_bytes()
