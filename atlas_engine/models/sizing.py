"""What a model takes in memory, read from its files before any of it is loaded.

A loaded model holds its parameters and buffers at the dtype it runs in, its tokenizer, and the
Python objects of its modules. The parameters are counted from config.json alone: the model is
built on PyTorch's meta device, which allocates no storage, by the class the loader uses, so no
architecture needs a formula here (a config that claims hidden_size 4096 is counted at 4096,
whatever its weight file holds). A GGUF checkpoint not converted yet has no config.json: its
pinned counts stand in (sources.GgufCheckpoint), and its first load takes what its conversion
takes at the peak.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch
from transformers import AutoConfig

from atlas_engine.errors import ModelUnavailable
from atlas_engine.models.families import architecture_from_dict
from atlas_engine.models.lm_head import auto_class, head_kind
from atlas_engine.models.placement import Placement
from atlas_engine.models.registry import ModelSpec
from atlas_engine.models.sources import (
    GGUF_SOURCES,
    checkpoint_folder,
    family_of,
    read_config,
    tokenizer_file_bytes,
    unavailable_reason,
    unknown_model_type,
)

MiB = 2**20
TOKENIZER_FACTOR = 10
"""A tokenizer in memory, as a multiple of its files' bytes: measured 7.7 times for Gemma 3's
(33.4 MB of tokenizer.json, 258 MB loaded) and 8.0 for SmolLM2's (3.5 MB, 28 MB)."""
TOKENIZER_FLOOR = 16 * MiB
"""What any tokenizer is given at least (MiniLM's WordPiece: 0.7 MB of files, 14 MB loaded)."""
LAYER_OBJECT_BYTES = 64 * 2**10
"""The Python objects of one layer's modules (25 KB measured on the meta device), counted so
that a config claiming a million layers is refused before it is built, even on the meta device."""


@dataclass(frozen=True)
class ModelSize:
    """What a model holds once loaded (`resident`) and what its load takes (`loading`)."""

    parameters: int
    weight_bytes: int  # parameters and buffers at the dtype the model runs in
    tokenizer_bytes: int  # TOKENIZER_FACTOR times its files, at least TOKENIZER_FLOOR
    layers: int
    conversion_bytes: int = 0  # a GGUF's conversion at its peak, where it is still to run

    @property
    def resident(self) -> int:
        return self.weight_bytes + self.tokenizer_bytes + self.layers * LAYER_OBJECT_BYTES

    @property
    def loading(self) -> int:
        return max(self.resident, self.conversion_bytes)

    def describe(self) -> str:
        if self.conversion_bytes > self.resident:
            return f"its GGUF's conversion takes {self.conversion_bytes / MiB:,.0f} MiB at the peak"
        return (
            f"{self.parameters:,} parameters take {self.weight_bytes / MiB:,.0f} MiB and its "
            f"tokenizer {self.tokenizer_bytes / MiB:,.0f} MiB"
        )


def tokenizer_allowance(file_bytes: int) -> int:
    return max(TOKENIZER_FLOOR, TOKENIZER_FACTOR * file_bytes)


def model_size(
    spec: ModelSpec,
    cache_dir: Path,
    placement: Placement,
    hub_downloads: bool = False,
    most: int | None = None,
) -> ModelSize:
    """What `spec` would take, from its files alone; ModelUnavailable where they cannot say
    (the same reasons a load would give: files missing, config.json unreadable or impossible).
    most: a bound past which a config is refused before its model is built on the meta device."""
    reason = unavailable_reason(spec, hub_downloads)
    if reason is not None:
        raise ModelUnavailable(reason)
    itemsize = placement.dtype.itemsize
    checkpoint = GGUF_SOURCES.get(spec.source)
    folder = checkpoint_folder(spec, cache_dir)
    if checkpoint is not None and folder is None:  # its first load converts it
        return ModelSize(
            parameters=checkpoint.parameters,
            weight_bytes=checkpoint.parameters * itemsize,
            tokenizer_bytes=tokenizer_allowance(checkpoint.tokenizer_bytes),
            layers=0,
            conversion_bytes=checkpoint.conversion_bytes,
        )
    config = read_config(spec, cache_dir, strict=True)
    if config is None:  # a Hub model that is not cached: its config.json alone, first
        config = _downloaded_config(spec)
    family = family_of(spec, config)
    if family is None:
        raise ModelUnavailable(unknown_model_type(spec, config))
    try:
        layers = architecture_from_dict(config).num_layers
    except ValueError as err:
        raise ModelUnavailable(f"'{spec.id}' cannot be used: {err}") from None
    if most is not None and layers * LAYER_OBJECT_BYTES > most:
        raise ModelUnavailable(
            f"'{spec.id}': its config.json claims {layers:,} layers, whose modules alone would "
            f"take more than the {most / MiB:,.0f} MiB that models may hold (ATLAS_MODEL_BYTES)"
        )
    parameters, weight_bytes = _counted(spec, config, family, itemsize)
    files = tokenizer_file_bytes(folder) if folder is not None else 0
    return ModelSize(parameters, weight_bytes, tokenizer_allowance(files), layers)


def _counted(spec: ModelSpec, config: dict, family, itemsize: int) -> tuple[int, int]:
    """(parameters, bytes of parameters and buffers) of the model the loader would build."""
    fields = {k: v for k, v in config.items() if k != "model_type"}
    try:
        parsed = AutoConfig.for_model(config["model_type"], **fields)
        with torch.device("meta"):
            model = auto_class(head_kind(family, config)).from_config(
                parsed, trust_remote_code=False, attn_implementation="eager"
            )
    except Exception as err:  # transformers refuses configs in many ways
        line = (str(err).strip().splitlines() or [type(err).__name__])[0][:200]
        raise ModelUnavailable(
            f"'{spec.id}': its config.json describes no model transformers can build ({line})"
        ) from None
    parameters, nbytes = 0, 0
    for tensor in model.parameters():
        parameters += tensor.numel()
        nbytes += tensor.numel() * (
            itemsize if tensor.is_floating_point() else tensor.element_size()
        )
    for tensor in model.buffers():
        nbytes += tensor.numel() * tensor.element_size()
    return parameters, nbytes


def _downloaded_config(spec: ModelSpec) -> dict:
    """A Hub model's config.json downloaded alone (Hub downloads are on: unavailable_reason
    passed a model that is not cached only then)."""
    from huggingface_hub import hf_hub_download

    try:
        hf_hub_download(spec.id, "config.json")
    except Exception as err:  # the network's and the Hub's errors alike
        line = (str(err).strip().splitlines() or [type(err).__name__])[0][:200]
        raise ModelUnavailable(
            f"'{spec.id}': its config.json could not be downloaded ({line})"
        ) from None
    config = read_config(spec, strict=True)
    if config is None:
        raise ModelUnavailable(f"'{spec.id}': its config.json is not in the HuggingFace cache")
    return config
