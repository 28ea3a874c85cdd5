"""A text (or sentence pair) as a model's inputs, and the word each token belongs to.

transformers' tokenizer call wraps the Rust tokenizer (`tokenizers`) in argument checks, batching
and a BatchEncoding: 0.45 ms of a new 16-token request on this machine, 0.16 ms of it the Rust
tokenizer (docs/performance.md). For a plain fast tokenizer, set as that call leaves it for one
text (no truncation, no padding), the same encoding is read from the Rust tokenizer directly;
any other tokenizer goes through transformers' call.
tests/atlas_engine/inference/test_encoding.py holds the two equal on every tokenizer the tests
have.
"""

from __future__ import annotations

import torch
from torch import Tensor
from transformers import PreTrainedTokenizerBase
from transformers import PreTrainedTokenizerFast as _FastBase  # TokenizersBackend in 5.x


def encode(
    tokenizer: PreTrainedTokenizerBase, text: str, text_pair: str | None
) -> tuple[dict[str, Tensor], list[int]]:
    """({input name: (1, seq) int64 tensor}, word number of each token). Every name the
    tokenizer returns (input_ids, attention_mask, token_type_ids where it has them), nothing
    truncated. Tokens of one word share a number (segment B's words after segment A's);
    special tokens have -1."""
    backend = _plain_backend(tokenizer)
    if backend is None:
        encoding = tokenizer(text, text_pair, return_tensors="pt", truncation=False)
        return dict(encoding), _word_numbers_of(encoding)
    encoded = backend.encode(text, text_pair or None)  # "" is no pair, as the call reads it
    inputs = {"input_ids": encoded.ids}
    if "token_type_ids" in tokenizer.model_input_names:
        inputs["token_type_ids"] = encoded.type_ids
    if "attention_mask" in tokenizer.model_input_names:
        inputs["attention_mask"] = encoded.attention_mask
    tensors = {name: torch.tensor([values], dtype=torch.long) for name, values in inputs.items()}
    return tensors, word_numbers(encoded.word_ids, encoded.sequence_ids)


def _plain_backend(tokenizer: PreTrainedTokenizerBase):
    """The Rust tokenizer of a fast tokenizer whose call adds nothing to it for one text
    (transformers' own class's call, no truncation or padding set on the Rust side, special
    tokens kept whole), or None."""
    cls = type(tokenizer)
    if not (
        isinstance(tokenizer, _FastBase)
        and cls.__call__ is _FastBase.__call__
        and cls._encode_plus is _FastBase._encode_plus
    ):
        return None
    backend = tokenizer.backend_tokenizer
    plain = (
        backend.truncation is None
        and backend.padding is None
        and backend.encode_special_tokens == bool(tokenizer.split_special_tokens)
    )
    return backend if plain else None


def _word_numbers_of(encoding) -> list[int]:
    """word_numbers of a BatchEncoding; every token its own word where the tokenizer has no
    word ids (a slow, Python tokenizer)."""
    try:
        return word_numbers(encoding.word_ids(0), encoding.sequence_ids(0))
    except (ValueError, AttributeError):
        return list(range(encoding["input_ids"].shape[1]))


def word_numbers(word_ids: list[int | None], sequence_ids: list[int | None]) -> list[int]:
    """Word number of each token from a fast tokenizer's word and sequence ids, numbered across
    a sentence pair (segment B's words after segment A's); -1 for special tokens."""
    offset = 1 + max(
        (w for w, s in zip(word_ids, sequence_ids, strict=True) if s == 0 and w is not None),
        default=-1,
    )
    return [
        -1 if w is None else w + (offset if s == 1 else 0)
        for w, s in zip(word_ids, sequence_ids, strict=True)
    ]
