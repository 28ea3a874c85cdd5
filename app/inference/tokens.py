"""Turning vocabulary pieces into labels a person can read."""

from __future__ import annotations

from transformers import PreTrainedTokenizerBase

VISIBLE_WHITESPACE = str.maketrans({" ": "␣", "\n": "↵", "\t": "⇥", "\r": "␍"})


def display_tokens(
    tokenizer: PreTrainedTokenizerBase, ids: list[int]
) -> tuple[list[str], list[str], list[bool]]:
    """(display labels, raw vocabulary pieces, is-special flags) for each token id.

    Byte-level pieces (GPT-2's 'Ġcat', 'Ċ') are decoded to text and their whitespace made
    visible ('␣cat', '↵'); WordPiece continuations keep their '##' so subwords stay visible;
    special tokens ([CLS], <|endoftext|>) keep their names.
    """
    raw = tokenizer.convert_ids_to_tokens(ids)
    special_ids = set(tokenizer.all_special_ids)
    labels, special = [], []
    for token_id, piece in zip(ids, raw, strict=True):
        is_special = token_id in special_ids
        special.append(is_special)
        if is_special or piece.startswith("##"):
            labels.append(piece)
            continue
        text = tokenizer.convert_tokens_to_string([piece])
        if piece.startswith("▁") and not text.startswith(" "):
            text = " " + text  # SentencePiece word start, dropped by convert_tokens_to_string
        labels.append(text.translate(VISIBLE_WHITESPACE) if text else piece)
    return labels, raw, special
