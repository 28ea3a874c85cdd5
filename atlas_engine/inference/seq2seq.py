"""An encoder-decoder's other two attentions (T5 and the like): the decoder's self-attention
over the target text and its cross-attention from the target to the input.

The explorer's maps of such a model are its encoder's (atlas_engine.models.loader keeps the
encoder as `model`). Here the whole model runs once more, teacher-forced: the decoder reads
what it reads while it learns to write the target, its start token and then the target's
tokens shifted one place right (the target as the tokenizer writes labels, its last token
left out: the decoder writes it, it never reads it). transformers' own maps of one decoder
layer come back: the weights the model computed, exact by construction.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from atlas_engine.errors import InvalidInput
from atlas_engine.inference.forward import tokenize
from atlas_engine.inference.tokens import display_tokens
from atlas_engine.models.loader import LoadedModel
from atlas_engine.models.placement import model_device


def decoder_shape(loaded: LoadedModel) -> tuple[int, int]:
    """(decoder layers, heads) of an encoder-decoder; InvalidInput for any other model."""
    whole = loaded.seq2seq
    if whole is None:
        raise InvalidInput(
            f"'{loaded.id}' is not an encoder-decoder: it has one stack, whose maps every other "
            "view shows. This view is for models such as T5."
        )
    config = whole.config
    layers = _first(config, "decoder_layers", "num_decoder_layers", "num_layers")
    heads = _first(config, "decoder_attention_heads", "num_heads", "num_attention_heads")
    if layers is None or heads is None:
        raise InvalidInput(
            f"'{loaded.id}''s config does not say how many decoder layers and heads it has"
        )
    return layers, heads


def _first(config, *names: str) -> int | None:
    """The first of these config fields that is set (T5 names its decoder's layers
    num_decoder_layers, BART decoder_layers; T5's heads are num_heads in both stacks)."""
    for name in names:
        value = getattr(config, name, None)
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value
    return None


def decoder_input(loaded: LoadedModel, target: str, limit: int) -> list[int]:
    """What the decoder reads, teacher-forced: its start token, then the target's tokens (as
    the tokenizer writes labels, with its end token where it adds one) but the last. Refused
    over `limit` tokens, or where the config names no start token."""
    labels = loaded.tokenizer(text_target=target)["input_ids"]
    if not labels:
        raise InvalidInput("the target produced no tokens; type the text the decoder reads")
    if len(labels) > limit:
        raise InvalidInput(
            f"the target is {len(labels)} tokens long; the decoder's maps are read whole, at "
            f"most {limit} tokens here. Shorten the target."
        )
    return teacher_forced(loaded.seq2seq.config, labels, loaded.id)


def teacher_forced(config, labels: list[int], name: str) -> list[int]:
    """The decoder's input while it learns to write `labels`: its start token (the config's
    decoder_start_token_id), then the labels but the last (what transformers' own
    shift-right gives). InvalidInput where the config names no start token."""
    start = getattr(config, "decoder_start_token_id", None)
    if not isinstance(start, int) or isinstance(start, bool):
        raise InvalidInput(f"'{name}''s config names no decoder_start_token_id")
    return [start, *labels[:-1]]


def held_bytes(loaded: LoadedModel, seq: int, target: int) -> int:
    """What the pass holds at most, from the two lengths: every layer's encoder, decoder and
    cross maps (transformers returns them all), and hidden states of both stacks (a bound: 8
    tensors of (tokens, d_model) a layer)."""
    layers, heads = decoder_shape(loaded)
    enc_layers, enc_heads = loaded.arch.num_layers, loaded.arch.num_heads
    maps = enc_layers * enc_heads * seq * seq + layers * heads * (target * target + target * seq)
    hidden = 8 * (enc_layers * seq + layers * target) * loaded.arch.d_model
    return 4 * (maps + hidden)


@dataclass(frozen=True)
class DecoderMaps:
    """One decoder layer's maps, float32 on the host."""

    tokens: list[str]  # the input's (the encoder's, the cross-attention's keys)
    target_tokens: list[str]  # what the decoder reads: its start token, then the target's
    target_special: list[bool]
    decoder: Tensor  # (heads, S, S): the decoder's self-attention, causal
    cross: Tensor  # (heads, S, T): each target token's attention over the input


def decoder_maps(loaded: LoadedModel, text: str, target: list[int], layer: int) -> DecoderMaps:
    """Decoder layer `layer`'s self- and cross-attention over `text` (encoded as every pass is)
    with the decoder reading `target` (decoder_input), from one run of the whole model with
    attention output."""
    inputs, _ = tokenize(loaded, text, None, loaded.full_map_tokens)
    whole = loaded.seq2seq
    device = model_device(whole)
    decoder_ids = torch.tensor([target], device=device)
    encoder_inputs = {
        k: v.to(device) for k, v in inputs.items() if k == "input_ids" or k == "attention_mask"
    }
    with loaded.lock, torch.inference_mode():
        out = whole(**encoder_inputs, decoder_input_ids=decoder_ids, output_attentions=True)
    labels, _, special = display_tokens(loaded.tokenizer, target)
    tokens = display_tokens(loaded.tokenizer, inputs["input_ids"][0].tolist())[0]
    return DecoderMaps(
        tokens=tokens,
        target_tokens=labels,
        target_special=special,
        decoder=out.decoder_attentions[layer][0].to("cpu", torch.float32),
        cross=out.cross_attentions[layer][0].to("cpu", torch.float32),
    )
