"""Run any transformers model the user already has and keep what Atlas shows: tokens and maps.

    from attention_atlas import run_model
    run = run_model("path/or/hub-id", "The cat sat on the mat.")
    run.attentions.shape  # (layers, heads, seq, seq)

The two models the server embeds load by the server's ids, offline:
"sentence-transformers/all-MiniLM-L6-v2" (from its pip package) and
"HuggingFaceTB/SmolLM2-135M-Instruct" (its GGUF, converted once into `cache_folder()`: the
user's cache folder, or the folder ATLAS_CACHE_DIR names; never the current folder).

The model runs with eager attention (the only implementation that returns weights), on its own
device and dtype; the maps come back as float32 on the CPU, exactly what the model computed (a
half-precision model's weights are widened, not recomputed). For the three families Atlas can
replay (BERT, GPT-2, Llama), the hidden state entering each attention block is kept as well.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass, field
from pathlib import Path

import platformdirs
import torch
from torch import Tensor, nn
from transformers import AutoConfig, AutoTokenizer, PreTrainedModel, PreTrainedTokenizerBase

from atlas_engine.inference.seq2seq import teacher_forced
from atlas_engine.inference.tokens import display_tokens
from atlas_engine.models import capture
from atlas_engine.models.lm_head import auto_class, head_kind, split_head
from atlas_engine.models.registry import BUILTIN_MODELS, MODEL_TYPE_FAMILIES, Family
from atlas_engine.models.sources import embedded_folder

MAX_TOKENS = 4096  # maps grow with the square: 4,096 tokens of a 12 x 12 model is 9.7 GB
CACHE_VARIABLE = "ATLAS_CACHE_DIR"  # the server's setting too (atlas_engine.config.Settings)
log = logging.getLogger("attention_atlas")


def cache_folder() -> Path:
    """The folder run_model keeps converted weights in (SmolLM2's GGUF as safetensors, 517 MB,
    written once): the one ATLAS_CACHE_DIR names where it is set, the variable the server reads,
    so that both can share one copy; otherwise the user's cache folder (platformdirs):
    $XDG_CACHE_HOME/attention-atlas or ~/.cache/attention-atlas on Linux,
    ~/Library/Caches/attention-atlas on macOS, %LOCALAPPDATA%\\attention-atlas\\Cache on Windows.
    Never the current folder: the server's default, var/cache, is relative to where the server
    starts, which a library cannot choose."""
    chosen = os.environ.get(CACHE_VARIABLE, "").strip()
    if chosen:
        return Path(chosen).expanduser()
    return platformdirs.user_cache_path("attention-atlas", appauthor=False)


@dataclass
class AttentionRun:
    """What one forward pass showed. Shapes: L layers, H heads, T tokens (S target tokens for
    an encoder-decoder, whose decoder maps are (L, H, S, S) and cross maps (L, H, S, T))."""

    model_name: str
    tokens: list[str]  # readable labels, '␣' for a leading space
    token_ids: list[int]
    special_tokens: list[bool]  # True for [CLS], [SEP], <|endoftext|> ...
    attentions: Tensor  # (L, H, T, T) float32 on the CPU; an encoder-decoder's encoder maps
    family: Family | None  # the lab's weight layout where Atlas knows it; None otherwise
    causal: bool
    num_kv_heads: int
    hidden_inputs: Tensor | None = None  # (L, T, D): what entered each attention block
    target_tokens: list[str] | None = None
    decoder_attentions: Tensor | None = None  # (L, H, S, S)
    cross_attentions: Tensor | None = None  # (L, H, S, T): decoder queries, encoder keys
    model: nn.Module | None = field(default=None, repr=False)  # the base model, for replay
    calls: list[capture.LayerCall] | None = field(default=None, repr=False)  # each layer's
    # attention call, to replay it (atlas_engine.models.capture); None where heads are not replayed
    replay_refusal: str | None = "an encoder-decoder's heads are not replayed here"
    text: str | None = None  # what the model ran on (the lens and attribution run it again)
    text_pair: str | None = None
    tokenizer: PreTrainedTokenizerBase | None = field(default=None, repr=False)
    layers: list[nn.Module] | None = field(default=None, repr=False)  # each layer's attention
    predictor: nn.Module | None = field(default=None, repr=False)  # the model with its LM head,
    # where the checkpoint has one (what the lens and direct attribution read)
    predicts: str | None = None  # "next_token" or "masked" where there is a predictor

    @property
    def num_layers(self) -> int:
        """L, the layers in `attentions` (an encoder-decoder's encoder layers)."""
        return self.attentions.shape[0]

    @property
    def num_heads(self) -> int:
        """H, the query heads of a layer (sharing num_kv_heads key/value heads)."""
        return self.attentions.shape[1]

    @property
    def replayable(self) -> bool:
        """Whether Query · Key and Step by step can be shown: the layers' calls were kept."""
        return self.calls is not None and self.hidden_inputs is not None


def _embedded(model: str) -> Path | None:
    """The folder of a model the server embeds, by the id the server gives it, found, checked
    and (SmolLM2, the first time) converted into cache_folder() by the server's own code; None
    for any other name."""
    spec = next((spec for spec in BUILTIN_MODELS if spec.id == model), None)
    if spec is None:
        return None
    return embedded_folder(spec, cache_folder(), lambda stage, _: log.info("%s: %s", model, stage))


def _load(model: str, tokenizer: PreTrainedTokenizerBase | None, dtype, device):
    """(the model, with its LM head where its checkpoint has one; the tokenizer)."""
    location = _embedded(model) or model
    tokenizer = tokenizer or AutoTokenizer.from_pretrained(location)
    config = AutoConfig.from_pretrained(location).to_dict()
    kind = head_kind(MODEL_TYPE_FAMILIES.get(config.get("model_type")), config)
    loaded, loading = auto_class(kind).from_pretrained(
        location, attn_implementation="eager", dtype=dtype or torch.float32,
        output_loading_info=True,
    )  # fmt: skip
    base, predictor, _ = split_head(loaded, loading, kind)
    return (predictor or base).to(device or "cpu"), tokenizer


def _predictor(model: PreTrainedModel) -> tuple[nn.Module | None, str | None]:
    """(the model itself and what it predicts, where it is a model with an LM head)."""
    kind = head_kind(None, {"architectures": [type(model).__name__]})
    has_head = model is not model.base_model and model.get_output_embeddings() is not None
    return (model, kind) if kind is not None and has_head else (None, None)


def _eager(model: PreTrainedModel) -> None:
    """Switch a model the user built to eager attention (sdpa returns no weights)."""
    if getattr(model.config, "_attn_implementation", "eager") != "eager":
        model.set_attn_implementation("eager")


def run_model(
    model: str | os.PathLike | PreTrainedModel,
    text: str,
    text_pair: str | None = None,
    *,
    tokenizer: PreTrainedTokenizerBase | None = None,
    target: str | None = None,
    dtype: torch.dtype | None = None,
    device: str | torch.device | None = None,
) -> AttentionRun:
    """Run `model` (a transformers model object, or a Hub id or folder to load) on `text`.

    text_pair makes a sentence pair (encoders); target is the text an encoder-decoder such as
    T5 writes: its decoder reads it teacher-forced (its start token, then the target's tokens
    but the last; `target_tokens`), and the decoder and cross-attention maps come back too. dtype and
    device apply when the model is loaded here; a model object stays where it is.

    Returns an AttentionRun: `tokens` (T readable labels), `attentions` float32 (L, H, T, T)
    on the CPU, and for a family Atlas replays `hidden_inputs` (L, T, D), the hidden state
    entering each attention block; an encoder-decoder's adds `decoder_attentions`
    (L, H, S, S) and `cross_attentions` (L, H, S, T). A text of 0 or more than MAX_TOKENS
    tokens raises ValueError.
    """
    name = None  # a model object is named by its config
    if isinstance(model, (str, os.PathLike)):
        name = str(model)
        model, tokenizer = _load(name, tokenizer, dtype, device)
    elif tokenizer is None:
        tokenizer = AutoTokenizer.from_pretrained(model.config.name_or_path)
    _eager(model)
    model.eval()
    device = next(model.parameters()).device
    encoding = tokenizer(text, text_pair, return_tensors="pt", truncation=False)
    n = encoding["input_ids"].shape[1]
    if not 0 < n <= MAX_TOKENS:
        raise ValueError(f"the text is {n} tokens; run_model takes 1 to {MAX_TOKENS}")
    inputs = {k: v.to(device) for k, v in encoding.items() if k != "token_type_ids"}
    if "token_type_ids" in encoding and model.config.model_type not in ("distilbert", "t5"):
        inputs["token_type_ids"] = encoding["token_type_ids"].to(device)
    if model.config.is_encoder_decoder:
        return _run_encoder_decoder(model, tokenizer, inputs, target or text, name)
    base = model.base_model
    predictor, predicts = _predictor(model)
    family = MODEL_TYPE_FAMILIES.get(model.config.model_type)
    probe = {k: v[:, :4] for k, v in inputs.items()}  # a few tokens find the layers
    layers, refusal = capture.attach(base, probe, base.config.num_hidden_layers)
    recorder = capture.Recorder()
    captured: list[Tensor] = []
    calls: list[capture.LayerCall] = []

    def record(module, args, kwargs):
        hidden, call = capture.record_call(recorder, module, args, kwargs)
        captured.append(hidden.detach())
        calls.append(call)

    handles = [m.register_forward_pre_hook(record, with_kwargs=True) for m in layers]
    try:
        with torch.inference_mode(), capture.recording(recorder):
            output = base(**inputs, output_attentions=True)
    finally:
        for handle in handles:
            handle.remove()
    if not output.attentions:
        raise ValueError(f"{model.config.model_type} returned no attention weights")
    maps = _stack(output.attentions)
    return AttentionRun(
        **_what_every_run_has(model, tokenizer, inputs["input_ids"][0].tolist(), maps, name),
        family=family,
        causal=family.causal if family else _looks_causal(maps),
        num_kv_heads=getattr(model.config, "num_key_value_heads", None) or maps.shape[1],
        hidden_inputs=torch.stack([h[0] for h in captured]).float().cpu() if captured else None,
        calls=calls or None,
        replay_refusal=refusal,
        model=base if calls else None,
        text=text,
        text_pair=text_pair,
        tokenizer=tokenizer,
        layers=layers if calls else None,
        predictor=predictor,
        predicts=predicts,
    )


def _run_encoder_decoder(
    model, tokenizer, inputs: dict, target: str, name: str | None
) -> AttentionRun:
    labels = tokenizer(text_target=target)["input_ids"]
    forced = teacher_forced(model.config, labels, name or model.config.model_type)
    decoder_ids = torch.tensor([forced], device=inputs["input_ids"].device)
    with torch.inference_mode():
        output = model(**inputs, decoder_input_ids=decoder_ids, output_attentions=True)
    target_ids = decoder_ids[0].tolist()
    encoder = _stack(output.encoder_attentions)
    return AttentionRun(
        **_what_every_run_has(model, tokenizer, inputs["input_ids"][0].tolist(), encoder, name),
        family=None,
        causal=False,
        num_kv_heads=encoder.shape[1],
        target_tokens=display_tokens(tokenizer, target_ids)[0],
        decoder_attentions=_stack(output.decoder_attentions),
        cross_attentions=_stack(output.cross_attentions),
    )


def _what_every_run_has(model, tokenizer, ids: list[int], maps: Tensor, name: str | None) -> dict:
    labels, _, special = display_tokens(tokenizer, ids)
    return {
        "model_name": name or str(model.config.name_or_path or model.config.model_type),
        "tokens": labels,
        "token_ids": ids,
        "special_tokens": special,
        "attentions": maps,
    }


def _stack(layers) -> Tensor:
    """The model's per-layer (1, H, Q, K) maps as one (L, H, Q, K) float32 CPU tensor."""
    return torch.stack([layer[0].float().cpu() for layer in layers])


def _looks_causal(maps: Tensor) -> bool:
    """Whether no query gives any weight to a later key (what a causal mask does)."""
    return maps.shape[-1] > 1 and not maps.triu(1).any()


@dataclass
class ImageRun:
    """What one pass of a vision transformer over an image showed. T = prefix + rows x cols
    tokens: the prefix tokens (the class token; DeiT's distillation token; registers) first,
    then the patches row by row."""

    attentions: Tensor  # (L, H, T, T) float32, the model's own output_attentions
    hidden: Tensor  # (T, D) the last layer's output, before the final norm
    rows: int
    cols: int
    prefix: int
    patch: int  # a patch's side in pixels of the image as the model sees it
    seen: object = field(repr=False)  # (H, W, 3) uint8 numpy: that image, resized and padded


def run_image(image, model: str | os.PathLike | None = None) -> ImageRun:
    """Run a vision transformer on `image` (a path, the file's bytes, or a PIL image) as the
    server's images page does: the embedded DINOv2-small (converted once into `cache_folder()`)
    unless `model` names a ViT-family folder or cached Hub id (ViT, DeiT, DINOv2 with or without
    registers, CLIP or SigLIP vision). The image is checked and prepared as the server prepares
    an upload (atlas_engine.vision); a bad one raises atlas_engine.errors.InvalidInput."""
    from PIL import Image

    from atlas_engine.vision.images import decode_image
    from atlas_engine.vision.models import IMAGE_MODEL_ID, image_attention, load_image_model
    from atlas_engine.vision.prepare import prepare

    if isinstance(image, Image.Image):
        picture = image.convert("RGB")
    else:
        data = image if isinstance(image, bytes) else Path(image).read_bytes()
        picture = decode_image(data)
    loaded = load_image_model(str(model or IMAGE_MODEL_ID), cache_folder())
    prepared = prepare(picture, loaded.processor)
    maps = image_attention(loaded, prepared.pixel_values)
    return ImageRun(
        attentions=maps.weights, hidden=maps.hidden, rows=maps.rows, cols=maps.cols,
        prefix=maps.prefix, patch=loaded.patch_size, seen=prepared.seen,
    )  # fmt: skip
