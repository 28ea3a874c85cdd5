"""Texts of a known number of SmolLM2 tokens for the live-server tests that need long work."""

from __future__ import annotations

from functools import cache

from tests.support.live import REPO

IOI = " When Mary and John went to the store, John gave a drink to"
IOI_CORRUPTED = " When Mary and John went to the store, Mary gave a drink to"


@cache
def tokenizer():
    from transformers import AutoTokenizer

    from atlas_engine.models.sources import smollm2_folder

    return AutoTokenizer.from_pretrained(smollm2_folder(REPO / "var" / "cache", print))


def prose_texts(*lengths: int) -> list[str]:
    """The project's own prose, one text of each length (bench.compression.prose)."""
    from bench.compression import prose

    return [prose(tokenizer(), n) for n in lengths]


def patching_pair(n_tokens: int) -> tuple[str, str]:
    """(clean, corrupted) texts of n_tokens SmolLM2 tokens each that differ in one name: the
    project's prose, then the IOI sentence (the clean text's answer is ' Mary', the other's
    ' John')."""
    from bench.compression import prose

    names = len(tokenizer()(IOI)["input_ids"])
    before = prose(tokenizer(), n_tokens - names + 2)
    clean, corrupted = before + IOI, before + IOI_CORRUPTED
    for text in (clean, corrupted):
        count = len(tokenizer()(text)["input_ids"])
        assert count == n_tokens, f"{count} tokens, not {n_tokens}: {text!r}"
    return clean, corrupted


def kinds_of_text(n_tokens: int) -> dict[str, str]:
    """Four kinds of text of at most n_tokens SmolLM2 tokens (as many as fit in the API's
    MAX_TEXT_CHARS): random vocabulary words (short ones, drawn with a fixed seed: the model
    can predict nothing), the project's prose, its prose of 300 tokens written again and
    again, and its own Python code."""
    import random

    from atlas_engine.schemas.attention import MAX_TEXT_CHARS
    from bench.compression import prose

    tok = tokenizer()
    draw = random.Random(0)
    words = [i for i in range(len(tok)) if _short_word(tok.decode([i]))]
    code = "\n".join(path.read_text() for path in sorted((REPO / "atlas_engine").rglob("*.py")))
    again = tok(prose(tok, 302), add_special_tokens=False)["input_ids"]
    return {
        "random words": _fit(
            [draw.choice(words) for _ in range(n_tokens)], n_tokens, MAX_TEXT_CHARS
        ),
        "repeated text": _fit(again * (n_tokens // len(again) + 1), n_tokens, MAX_TEXT_CHARS),
        "prose": _fit(tok(prose(tok, n_tokens + 2))["input_ids"], n_tokens, MAX_TEXT_CHARS),
        "code": _fit(tok(code)["input_ids"], n_tokens, MAX_TEXT_CHARS),
    }


def _short_word(piece: str) -> bool:
    return (
        piece.startswith(" ") and 2 <= len(piece) <= 4 and piece[1:].isalpha() and piece.isascii()
    )


def _fit(ids: list[int], n_tokens: int, chars: int) -> str:
    """The longest decoded prefix of ids that reads back as at most n_tokens tokens within
    `chars` characters."""
    tok = tokenizer()
    for cut in range(n_tokens, 0, -8):
        text = tok.decode(ids[:cut])
        if len(text) <= chars and len(tok(text)["input_ids"]) <= n_tokens:
            return text
    raise ValueError("no prefix fits")
