"""Loading one model: eager attention, eval mode, safetensors only, no remote code."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from pathlib import Path

import torch
from torch import nn
from transformers import AutoModel, AutoTokenizer, PreTrainedTokenizerBase
from transformers.utils import logging as hf_logging

from app.errors import ModelUnavailable
from app.models.families import Architecture, architecture
from app.models.registry import Family, ModelSpec, Source
from app.models.sources import (
    Progress,
    family_of,
    minilm_folder,
    read_config,
    smollm2_folder,
    unavailable_reason,
)

hf_logging.disable_progress_bar()
hf_logging.set_verbosity_error()


@dataclass
class LoadedModel:
    """A model ready for inference. `lock` serialises forward passes (hooks are per call)."""

    spec: ModelSpec
    family: Family
    tokenizer: PreTrainedTokenizerBase
    model: nn.Module
    arch: Architecture
    max_tokens: int
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    @property
    def id(self) -> str:
        return self.spec.id

    @property
    def causal(self) -> bool:
        return self.family.causal


def _location(
    spec: ModelSpec, cache_dir: Path, progress: Progress, hub_downloads: bool
) -> tuple[str | Path, bool]:
    """(what to pass to from_pretrained, local_files_only)."""
    if spec.source is Source.MINILM_PACKAGE:
        return minilm_folder(progress), True
    if spec.source is Source.SMOLLM2_PACKAGE:
        return smollm2_folder(cache_dir, progress), True
    if spec.source is Source.FOLDER:
        return spec.folder, True
    return spec.id, not hub_downloads


def load_model(
    spec: ModelSpec,
    *,
    cache_dir: Path,
    token_limit: int,
    progress: Progress,
    hub_downloads: bool = False,
) -> LoadedModel:
    """Load `spec` or raise ModelUnavailable saying why (never anything else for a bad model)."""
    reason = unavailable_reason(spec, hub_downloads)
    if reason is not None:
        raise ModelUnavailable(reason)
    family = family_of(spec, read_config(spec))
    if family is None and spec.source is not Source.HUB:
        raise ModelUnavailable(
            f"'{spec.id}': architecture not supported; Attention Atlas reads BERT, DistilBERT, "
            "RoBERTa, GPT-2 and Llama-family checkpoints"
        )
    try:
        location, local_only = _location(spec, cache_dir, progress, hub_downloads)
        progress("loading tokenizer", 0.85)
        tokenizer = AutoTokenizer.from_pretrained(
            location, local_files_only=local_only, trust_remote_code=False
        )
        progress("loading weights", 0.9)
        model = AutoModel.from_pretrained(
            location,
            local_files_only=local_only,
            trust_remote_code=False,
            use_safetensors=True,
            attn_implementation="eager",
            dtype=torch.float32,
        )
    except ModelUnavailable:
        raise
    except Exception as err:  # any failure to read a checkpoint is the model's, not the server's
        raise ModelUnavailable(f"'{spec.id}' could not be loaded: {_first_line(err)}") from err
    model.eval().requires_grad_(False)
    family = family or family_of(spec, model.config.to_dict())
    if family is None:
        raise ModelUnavailable(
            f"'{spec.id}': model type {model.config.model_type!r} is not supported"
        )
    arch = architecture(model.config, family)
    progress("ready", 1.0)
    return LoadedModel(
        spec=spec,
        family=family,
        tokenizer=tokenizer,
        model=model,
        arch=arch,
        max_tokens=min(arch.max_positions, token_limit),
    )


def _first_line(err: BaseException) -> str:
    text = str(err).strip().splitlines()
    return text[0][:300] if text else type(err).__name__
