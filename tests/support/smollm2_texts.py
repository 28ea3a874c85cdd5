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
