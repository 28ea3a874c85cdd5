"""Loading one model: eager attention, eval mode, safetensors only, no remote code."""

from __future__ import annotations

import inspect
import json
import logging
import re
import threading
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Literal

import torch
from torch import nn
from transformers import AutoTokenizer, PreTrainedTokenizerBase
from transformers.utils import logging as hf_logging

from atlas_engine.errors import ModelUnavailable
from atlas_engine.models import capture
from atlas_engine.models.families import Architecture, architecture, architecture_from_dict
from atlas_engine.models.lm_head import Predicts, auto_class, head_kind, split_head
from atlas_engine.models.placement import CPU_FLOAT32, Placement, model_device
from atlas_engine.models.registry import Family, ModelSpec, Source
from atlas_engine.models.sources import (
    Progress,
    embedded_folder,
    family_of,
    read_config,
    unavailable_reason,
    unknown_model_type,
)

log = logging.getLogger("attention_atlas")
hf_logging.disable_progress_bar()
hf_logging.set_verbosity_error()


FULL_MAPS_MAX_TOKENS = 512
"""The longest text a request may read every map of at once (the explorer's views, following a
token, ablation, generation...): 283 MB of float32 maps for SmolLM2 at 512 tokens, and the
limit of a model whose maps are stored rather than replayed. Longer texts, up to a model's own
context, are read a window at a time (/api/attention/tiles), a layer at a time (/api/attention,
sized by its answer) or a block of rows at a time (head statistics and search)."""


def token_limit_of(arch: Architecture, replayable: bool, dtype_name: str, server_limit: int) -> int:
    """A model's token limit: its positions and the server's limit, and FULL_MAPS_MAX_TOKENS
    where its maps must be stored whole (maps_replayed is False) or its layers' calls hold a
    (heads, T, T) position bias (T5), which a long text would make as large as the maps."""
    limit = min(arch.max_positions, server_limit)
    whole = not maps_replayed(replayable, dtype_name) or arch.position_bias
    return min(limit, FULL_MAPS_MAX_TOKENS) if whole else limit


def maps_replayed(replayable: bool, dtype_name: str) -> bool:
    """Whether a forward pass keeps hidden states only and replays maps on demand: where the
    capture path replays the model's heads (atlas_engine.inference.capture) and the model runs in
    float32 (a half-precision model keeps the maps it computed)."""
    return replayable and dtype_name == "float32"


@dataclass
class LoadedModel:
    """A model ready for inference. `lock` serialises forward passes (hooks are per call); it
    is re-entrant, for a short pass run between two layers of a long one on the heavy lane
    (atlas_engine.compute.run_beside), whose hooks act at their own depth only."""

    spec: ModelSpec
    family: Family
    tokenizer: PreTrainedTokenizerBase
    model: nn.Module
    arch: Architecture
    max_tokens: int
    causal: bool
    predictor: nn.Module | None = None  # `model` with its LM head, when the checkpoint has one
    predicts: Predicts | None = None  # what that head predicts; None where there is no head
    placement: Placement = CPU_FLOAT32
    attention_layers: list[nn.Module] = field(default_factory=list, repr=False)  # each layer's
    # self-attention module, in order, found by a pass under atlas_engine.inference.capture
    replay_refusal: str | None = "it was loaded without the capture path"  # why its heads
    # cannot be replayed; None where they can
    seq2seq: nn.Module | None = field(default=None, repr=False)  # an encoder-decoder whole
    # (`model` is its encoder): what its decoder and cross-attention maps come from
    lock: threading.RLock = field(default_factory=threading.RLock, repr=False)

    @property
    def id(self) -> str:
        return self.spec.id

    @cached_property
    def forward_inputs(self) -> frozenset[str]:
        """The names the model's forward takes (which of a tokenizer's outputs to pass it)."""
        return frozenset(inspect.signature(self.model.forward).parameters)

    @property
    def replayable(self) -> bool:
        """Whether views that recompute a head (Query · Key, Step by step...) work for it."""
        return self.replay_refusal is None

    @property
    def maps_replayed(self) -> bool:
        return maps_replayed(self.replayable, self.placement.dtype_name)

    @property
    def full_map_tokens(self) -> int:
        """Token limit of the routes that read every map of a text."""
        return min(self.max_tokens, FULL_MAPS_MAX_TOKENS)


def _location(
    spec: ModelSpec,
    cache_dir: Path,
    progress: Progress,
    hub_downloads: bool,
    may_convert: bool = True,
) -> tuple[str | Path, bool]:
    """(what to pass to from_pretrained, local_files_only)."""
    embedded = embedded_folder(spec, cache_dir, progress, may_convert)
    if embedded is not None:
        return embedded, True
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
    placement: Placement = CPU_FLOAT32,
    may_convert: bool = True,
) -> LoadedModel:
    """Load `spec` on `placement`'s device in its dtype, or raise ModelUnavailable saying why
    (never anything else for a bad model). may_convert=False: a GGUF checkpoint that would
    have to be converted raises sources.ConversionNeeded instead (its memory was not sized)."""
    reason = unavailable_reason(spec, hub_downloads)
    if reason is not None:
        raise ModelUnavailable(reason)
    config = read_config(spec, strict=True)
    family = family_of(spec, config)
    if family is None and spec.source is not Source.HUB:
        raise ModelUnavailable(unknown_model_type(spec, config))
    if config is not None and family is not None:
        _check_config(spec.id, config)
    try:
        location, local_only = _location(spec, cache_dir, progress, hub_downloads, may_convert)
        progress("loading tokenizer", 0.85)
        tokenizer = AutoTokenizer.from_pretrained(
            location, local_files_only=local_only, trust_remote_code=False
        )
        progress("loading weights", 0.9)
        if config is None and isinstance(location, Path):  # a GGUF copy converted just now
            config = _config_in(location)
        kind = head_kind(family, config)
        model, loading = auto_class(kind).from_pretrained(
            location,
            local_files_only=local_only,
            trust_remote_code=False,
            use_safetensors=True,
            attn_implementation="eager",
            dtype=placement.dtype,
            output_loading_info=True,
        )
    except ModelUnavailable:
        raise
    except Exception as err:  # any failure to read a checkpoint is the model's, not the server's
        log.warning("loading %s failed: %s", spec.id, err)
        detail = _first_line(err, cache_dir, spec.folder)
        raise ModelUnavailable(f"'{spec.id}' could not be loaded: {detail}") from err
    model, predictor, loading = split_head(model, loading, kind)
    _check_weights(spec.id, loading)
    family = family or family_of(spec, model.config.to_dict())
    if family is None:
        raise ModelUnavailable(
            f"'{spec.id}': model type {model.config.model_type!r} is not supported"
        )
    seq2seq = None
    if family is Family.OTHER and model.config.is_encoder_decoder:
        seq2seq, model = model, model.get_encoder()  # the explorer's maps: its encoder's
    whole = next(m for m in (predictor, seq2seq, model) if m is not None)  # holds `model`
    whole.to(placement.device).eval().requires_grad_(False)
    try:
        arch = architecture(model.config)
    except ValueError as err:
        raise ModelUnavailable(f"'{spec.id}' cannot be used: {err}") from None
    causal = family.causal
    if causal is None:
        causal = probe_causal(model, tokenizer)
    layers, refusal = capture.attach(model, _probe_inputs(model, tokenizer), arch.num_layers)
    progress("ready", 1.0)
    return LoadedModel(
        spec=spec,
        family=family,
        tokenizer=tokenizer,
        model=model,
        arch=arch,
        max_tokens=token_limit_of(arch, refusal is None, placement.dtype_name, token_limit),
        causal=causal,
        predictor=predictor,
        predicts=kind if predictor is not None else None,
        placement=placement,
        attention_layers=layers,
        replay_refusal=refusal,
        seq2seq=seq2seq,
    )


def _config_in(folder: Path) -> dict | None:
    try:
        return json.loads((folder / "config.json").read_text())
    except (OSError, ValueError):
        return None


def _probe_inputs(model: nn.Module, tokenizer: PreTrainedTokenizerBase) -> dict:
    encoding = tokenizer("one two three four", return_tensors="pt")
    accepted = inspect.signature(model.forward).parameters
    return {k: v.to(model_device(model)) for k, v in encoding.items() if k in accepted}


def predicts_of(loaded: LoadedModel) -> Predicts | Literal["none"]:
    """What the model's LM head predicts, or 'none' when its checkpoint has no head."""
    return "none" if loaded.predictor is None else loaded.predicts


def probe_causal(model: nn.Module, tokenizer: PreTrainedTokenizerBase) -> bool:
    """Whether a model of an architecture Atlas has no adapter for masks the future, read off
    its own maps on a short text: causal when no query gives any weight to a later key."""
    encoding = tokenizer("one two three four", return_tensors="pt")
    inputs = {k: v.to(model_device(model)) for k, v in encoding.items() if k != "token_type_ids"}
    with torch.inference_mode():
        maps = model(**inputs, output_attentions=True).attentions  # L x (1, H, T, T)
    if not maps or maps[0] is None:
        raise ModelUnavailable(
            f"{model.config.model_type} models return no attention maps from transformers"
        )
    return all(bool((m[0].triu(diagonal=1) == 0).all()) for m in maps)


UNUSED_HEAD_PREFIXES = (
    "lm_head.", "cls.", "qa_outputs.", "classifier.", "pre_classifier.", "score.",
    "vocab_transform.", "vocab_layer_norm.", "vocab_projector.", "embed_out.",
    "final_logits_bias",  # the LM head's bias of BART, mBART, Marian, Pegasus
)  # fmt: skip
"""Task heads a checkpoint may carry that the base model (all attention needs) leaves out."""
OPTIONAL_MISSING_PREFIXES = ("pooler.",)
"""Weights the base model has but attention never reads (BertModel's pooler)."""


def _check_config(model_id: str, config: dict) -> None:
    try:
        architecture_from_dict(config)
    except ValueError as err:
        raise ModelUnavailable(f"'{model_id}' cannot be used: {err}") from None


def _check_weights(model_id: str, loading: dict) -> None:
    """Refuse a checkpoint whose weights do not fit its config: a layer the file lacks would
    run with random weights, and weights the config has no place for were meant for another
    model. Task heads the base model does not use (lm_head, cls ...) are fine."""
    missing = sorted(
        k for k in loading["missing_keys"] if not k.startswith(OPTIONAL_MISSING_PREFIXES)
    )
    unused = sorted(k for k in loading["unexpected_keys"] if not k.startswith(UNUSED_HEAD_PREFIXES))
    mismatched = sorted(
        str(k[0] if isinstance(k, tuple) else k) for k in loading["mismatched_keys"]
    )
    problems = [
        f"{len(found)} {what} weights (e.g. {found[0]})"
        for found, what in ((missing, "missing"), (unused, "unused"), (mismatched, "misshapen"))
        if found
    ]
    if problems:
        raise ModelUnavailable(
            f"'{model_id}': its weights do not match its config.json: {'; '.join(problems)}. "
            "The checkpoint is incomplete or its config was edited; use a checkpoint saved "
            "whole by save_pretrained."
        )


_ABSOLUTE_PATH = re.compile(r"(?<![\w.:/])/(?:[^\s'\"/]+/)*[^\s'\",;:]*")


def _first_line(err: BaseException, *folders: Path | None) -> str:
    """The error's first line for a client, without any server path in it: no absolute path,
    and no path inside `folders` (the cache folder, a model's folder), however they were
    written (ATLAS_CACHE_DIR is relative by default: var/cache)."""
    text = str(err).strip().splitlines()
    line = text[0][:300] if text else type(err).__name__
    for folder in folders:
        if folder is None:
            continue
        for written in sorted({str(folder), str(folder.resolve())}, key=len, reverse=True):
            if not written.strip("./"):
                continue  # "." or "/": the cache folder is the working directory or the root
            line = re.sub(rf"(?<![\w.-]){re.escape(written)}[^\s'\",;:]*", "<path>", line)
    return _ABSOLUTE_PATH.sub("<path>", line)
