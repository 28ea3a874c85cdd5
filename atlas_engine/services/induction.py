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
    and only words that tokenize back into one piece where the text writes them (after a
    space, and at its start), so each copy is `length` tokens. Draws are bounded: a vocabulary
    with too few such words is refused.
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
                sequence = " ".join(chosen)
                return f"{sequence} {sequence}"
    raise InvalidInput(
        f"'{loaded.id}' gave only {len(chosen)} plain words in {len(ids)} random draws; "
        "its vocabulary does not suit this test text"
    )


def _one_piece(tokenizer, word: str) -> bool:
    """Whether `word` is one token both after a space and at the start of a text."""
    return all(
        len(tokenizer(text, add_special_tokens=False)["input_ids"]) == 1
        for text in (word, f" {word}")
    )
