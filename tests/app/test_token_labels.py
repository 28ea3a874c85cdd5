"""Issue 9.3: every token is labelled by its own bytes, readably, on both embedded models."""

import itertools
import re

import pytest

from atlas_engine.models.registry import MINILM_ID, SMOLLM2_ID

TEXTS = {
    "cjk": "注意力机制让每个词都能看到其他所有的词。",
    "emoji": "I love attention 😀🚀 and 👩‍👩‍👧 families!",
    "accented": "Ça a été une façon naïve d'écrire à Zürich.",
    "rtl": "שלום עולם, مرحبا بالعالم",
}
NOTATION = re.compile(r"‹([0-9A-F]{2}(?: [0-9A-F]{2})*)›")
CODE_POINT = re.compile(r"‹U\+([0-9A-F]{4,6})›")


def rebuild(labels: list[str]) -> str:
    """The text back from the labels: byte pieces dropped (their character is shown on the
    token that completes it), visible whitespace and code points turned back."""
    text = "".join(NOTATION.sub("", label) for label in labels)
    text = CODE_POINT.sub(lambda m: chr(int(m.group(1), 16)), text)
    return text.replace("␣", " ").replace("↵", "\n").replace("⇥", "\t")


@pytest.mark.parametrize("kind", TEXTS)
def test_byte_level_tokens_read_as_characters_and_bytes_not_replacement_marks(client, kind):
    body = client.post(
        "/api/attention", json={"model": SMOLLM2_ID, "text": TEXTS[kind], "layers": [0]}
    ).json()
    labels = body["tokens"]
    assert not any("\ufffd" in label for label in labels), labels
    assert rebuild(labels) == TEXTS[kind]
    if kind in ("cjk", "emoji", "rtl"):
        assert any(NOTATION.search(label) for label in labels), labels  # split characters
    # Pieces of different characters read differently: no two neighbours share a label.
    assert all(a != b or not NOTATION.search(a) for a, b in itertools.pairwise(labels))


@pytest.mark.parametrize("kind", TEXTS)
def test_wordpiece_tokens_are_characters(client, kind):
    labels = client.post(
        "/api/attention", json={"model": MINILM_ID, "text": TEXTS[kind], "layers": [0]}
    ).json()["tokens"]
    assert not any("\ufffd" in label or NOTATION.search(label) for label in labels), labels


def test_invisible_and_reordering_characters_are_shown_as_code_points(client):
    labels = client.post(
        "/api/attention",
        json={"model": SMOLLM2_ID, "text": "a\u200db \u202eevil", "layers": [0]},
    ).json()["tokens"]
    joined = "".join(labels)
    assert "‹U+200D›" in joined and "‹U+202E›" in joined
    assert "\u200d" not in joined and "\u202e" not in joined
