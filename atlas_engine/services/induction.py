"""The standard test input for induction heads: a random token sequence, then the same again."""

from __future__ import annotations

import torch

from atlas_engine.errors import InvalidInput
from atlas_engine.models.loader import LoadedModel

MAX_DRAWS_PER_TOKEN = 50


def induction_text(loaded: LoadedModel, length: int, seed: int) -> str:
    """`length` random ordinary tokens of the model's vocabulary, decoded, written twice.

    Random tokens make a text the model cannot predict from language; in the second copy a
    head that looks at the token after the previous occurrence of the current token (an
    induction head) stands out. Only tokens that decode to a whole word of plain letters are
    drawn (" word" in byte-level vocabularies, "word" in WordPiece ones, never a "##" piece),
    and only words that tokenize into one piece after a space. Every word, the first one
    included, is written after a space, so both copies are the same `length` ids (" posts"
    twice, not "posts" then " posts"); the text is checked by tokenizing it, and a tokenizer
    whose copies still differ is refused rather than given a text that is not a repeat. Draws
    are bounded: a vocabulary with too few such words is refused.
    """
    tokenizer = loaded.tokenizer
    g = torch.Generator().manual_seed(seed)
    special = set(tokenizer.all_special_ids)
    ids = torch.randint(len(tokenizer), (MAX_DRAWS_PER_TOKEN * length,), generator=g).tolist()
    chosen: list[str] = []
    for token_id in ids:
        if token_id in special:
            continue
        word = tokenizer.decode([token_id]).strip()
        if word.isalpha() and word.isascii() and len(word) >= 3 and _one_piece(tokenizer, word):
            chosen.append(word)
            if len(chosen) == length:
                return _repeating(loaded, " ".join(chosen * 2), length)
    raise InvalidInput(
        f"'{loaded.id}' gave only {len(chosen)} plain words in {len(ids)} random draws; "
        "its vocabulary does not suit this test text"
    )


def _one_piece(tokenizer, word: str) -> bool:
    """Whether `word` is one token after a space."""
    return len(tokenizer(f" {word}", add_special_tokens=False)["input_ids"]) == 1


def _repeating(loaded: LoadedModel, words: str, length: int) -> str:
    """`words` written so that the tokenizer gives two equal copies of `length` ids: after a
    space (byte-level and most SentencePiece vocabularies) or, for a tokenizer that puts a
    space before a text's first word itself, as is. Refused when neither does."""
    for text in (f" {words}", words):
        ids = loaded.tokenizer(text, add_special_tokens=False)["input_ids"]
        if len(ids) == 2 * length and ids[:length] == ids[length:]:
            return text
    raise InvalidInput(
        f"'{loaded.id}' splits the repeated random words into pieces that do not repeat; "
        "its tokenizer does not suit this test text"
    )
