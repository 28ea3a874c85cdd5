"""An encoder-decoder's other two attentions (T5 and the like): the decoder's self-attention
over the target text and its cross-attention from the target to the input.

The explorer's maps of such a model are its encoder's (atlas_engine.models.loader keeps the
encoder as `model`). Here the whole model runs once more with the target as the decoder's
input (the target's tokens as the tokenizer writes them, teacher-forced: what the decoder
reads while it is trained to write them) and returns transformers' own maps of one decoder
layer: the weights the model computed, so exact by construction.
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
    layers = getattr(config, "num_decoder_layers", None) or config.num_layers
    return layers, config.num_heads


def target_ids(loaded: LoadedModel, target: str, limit: int) -> list[int]:
    """The decoder's input: the target's token ids as the tokenizer writes them (with its end
    token), refused over `limit` tokens."""
    ids = loaded.tokenizer(text_target=target)["input_ids"]
    if not ids:
        raise InvalidInput("the target produced no tokens; type the text the decoder reads")
    if len(ids) > limit:
        raise InvalidInput(
            f"the target is {len(ids)} tokens long; the decoder's maps are read whole, at most "
            f"{limit} tokens here. Shorten the target."
        )
    return ids


def held_bytes(loaded: LoadedModel, seq: int, target: int) -> int:
    """What the pass holds at most, from the two lengths: every layer's encoder, decoder and
    cross maps (transformers returns them all), and hidden states of both stacks (a bound: 8
    tensors of (tokens, d_model) a layer)."""
    layers, heads = decoder_shape(loaded)
    enc_layers = loaded.arch.num_layers
    maps = enc_layers * heads * seq * seq + layers * heads * (target * target + target * seq)
    hidden = 8 * (enc_layers * seq + layers * target) * loaded.arch.d_model
    return 4 * (maps + hidden)


@dataclass(frozen=True)
class DecoderMaps:
    """One decoder layer's maps, float32 on the host."""

    tokens: list[str]  # the input's (the encoder's, the cross-attention's keys)
    target_tokens: list[str]  # the decoder's
    target_special: list[bool]
    decoder: Tensor  # (heads, S, S): the decoder's self-attention, causal
    cross: Tensor  # (heads, S, T): each target token's attention over the input


def decoder_maps(loaded: LoadedModel, text: str, target: list[int], layer: int) -> DecoderMaps:
    """Decoder layer `layer`'s self- and cross-attention over `text` (encoded as every pass is)
    and `target` (target_ids), from one run of the whole model with attention output."""
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
