"""Turning vocabulary pieces into labels a person can read; how many tokens a text can have
at most, known before it is tokenised; and what a head's statistics need to know of each token
(token_facts)."""

from __future__ import annotations

import codecs
import json
import re
import unicodedata
import weakref
from functools import lru_cache
from typing import TYPE_CHECKING, Literal, NamedTuple

import torch
from transformers import PreTrainedTokenizerBase

from attention_core.head_stats import TokenFacts

if TYPE_CHECKING:
    from atlas_engine.inference.forward import ForwardResult
    from atlas_engine.models.loader import LoadedModel

VISIBLE_WHITESPACE = str.maketrans({" ": "␣", "\n": "↵", "\t": "⇥", "\r": "␍"})
BYTE_FALLBACK = re.compile(r"^<0x([0-9A-Fa-f]{2})>$")  # SentencePiece's byte pieces: <0xE4>


@lru_cache(maxsize=1)
def byte_level_alphabet() -> dict[str, int]:
    """The character -> byte table of byte-level BPE (GPT-2, Llama 3, SmolLM2): printable bytes
    stand for themselves, the other 68 are shifted past 255 so every byte is one character."""
    printable = [*range(ord("!"), ord("~") + 1), *range(0xA1, 0xAD), *range(0xAE, 0x100)]
    table, shifted = {}, 0
    for byte in range(256):
        if byte in printable:
            table[chr(byte)] = byte
        else:
            table[chr(256 + shifted)] = byte
            shifted += 1
    return table


_BYTE_LEVEL: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def _is_byte_level(tokenizer: PreTrainedTokenizerBase) -> bool:
    """Whether the tokenizer's pieces are GPT-2 style byte symbols; read once per tokenizer
    (its spec is megabytes of JSON, and predictions label thousands of candidates)."""
    if tokenizer in _BYTE_LEVEL:
        return _BYTE_LEVEL[tokenizer]
    backend = getattr(tokenizer, "backend_tokenizer", None)
    found = False
    if backend is not None:
        spec = json.loads(backend.to_str())
        found = "ByteLevel" in json.dumps(spec.get("decoder")) or "ByteLevel" in json.dumps(
            spec.get("pre_tokenizer")
        )
    _BYTE_LEVEL[tokenizer] = found
    return found


def piece_bytes(piece: str, byte_level: bool) -> bytes | None:
    """The bytes a vocabulary piece stands for, or None where pieces are whole characters."""
    if byte_level:
        table = byte_level_alphabet()
        if all(c in table for c in piece):
            return bytes(table[c] for c in piece)
        return None
    match = BYTE_FALLBACK.match(piece)
    return bytes([int(match.group(1), 16)]) if match else None


def byte_notation(data: bytes) -> str:
    """Bytes that are not a whole character yet, e.g. ‹E4 B8›."""
    return "‹" + " ".join(f"{b:02X}" for b in data) + "›"


def display_tokens(
    tokenizer: PreTrainedTokenizerBase, ids: list[int]
) -> tuple[list[str], list[str], list[bool]]:
    """(display labels, raw vocabulary pieces, is-special flags) for each token id.

    Byte-level pieces are decoded across the sequence as UTF-8: a token shows the characters
    it completes (the character whose last byte it holds) followed by the bytes it leaves
    unfinished, so a CJK character split over two tokens reads ‹E4 B8› then 中 instead of
    two identical �. Whitespace is made visible ('␣cat', '↵'); WordPiece continuations keep
    their '##'; special tokens ([CLS], <|endoftext|>) keep their names.
    """
    raw = tokenizer.convert_ids_to_tokens(ids)
    special_ids = set(tokenizer.all_special_ids)
    byte_level = _is_byte_level(tokenizer)
    decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
    pending = b""  # bytes of a character that an earlier token started
    labels, special = [], []
    for token_id, piece in zip(ids, raw, strict=True):
        is_special = token_id in special_ids
        special.append(is_special)
        data = None if is_special else piece_bytes(piece, byte_level)
        if data is None:
            if pending:  # a character left unfinished before a whole-character token
                decoder.reset()
                pending = b""
            keep = is_special or piece.startswith("##")
            labels.append(piece if keep else _text(tokenizer, piece))
            continue
        text = decoder.decode(data)
        pending = decoder.getstate()[0]  # bytes still waiting for the end of their character
        label = visible(text)
        if pending:
            label += byte_notation(pending[-min(len(pending), len(data)) :])
        labels.append(label or byte_notation(data))
    return labels, raw, special


_PIECE_TEXT: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def _text(tokenizer: PreTrainedTokenizerBase, piece: str) -> str:
    """A whole-character piece's label, remembered per tokenizer (at most its vocabulary):
    asking the tokenizer's decoder costs microseconds a token, a dictionary nanoseconds."""
    known = _PIECE_TEXT.setdefault(tokenizer, {})
    label = known.get(piece)
    if label is None:
        text = tokenizer.convert_tokens_to_string([piece])
        if piece.startswith("▁") and not text.startswith(" "):
            text = " " + text  # SentencePiece word start, dropped by convert_tokens_to_string
        label = known[piece] = visible(text) if text else piece
    return label


def visible(text: str) -> str:
    """Whitespace as ␣ ↵ ⇥ ␍, and characters that draw nothing or reorder text (zero-width
    joiners, bidirectional overrides, other controls) as their code point, e.g. ‹U+200D›."""
    out = []
    for char in text.translate(VISIBLE_WHITESPACE):
        category = unicodedata.category(char)
        if category in ("Cc", "Cf", "Zl", "Zp", "Zs"):
            out.append(f"‹U+{ord(char):04X}›")
        else:
            out.append(char)
    return "".join(out)


class TokenBound(NamedTuple):
    """How estimated_tokens bounds a tokenizer's count: at most one token per `unit` of each
    text, read in Unicode normal `form` ("" as it is), plus `per_text` (a leading space)."""

    unit: Literal["byte", "character", "none"]
    form: Literal["NFC", "NFD", ""] = ""
    per_text: int = 0


NO_BOUND = TokenBound("none")
_BOUNDS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def estimated_tokens(loaded: LoadedModel, text: str, text_pair: str | None = None) -> int:
    """An upper bound on the tokens a forward pass of `text` (and `text_pair`) can run on,
    without tokenising it: cheap enough for the event loop (under 1 ms for 2 MB of ASCII,
    25 ms of other text), for admission and the lanes' order. Never above the model's
    max_tokens (a longer text is refused before its pass), and never below the count:

    * byte-level BPE (GPT-2, SmolLM2, RoBERTa, Llama 3; no normalizer, or NFC): every token
      is at least one byte of the UTF-8 text, so the bytes (an emoji is 4, and may be 4
      tokens; a digit is 1 and one token), one more a text where the tokenizer adds a space;
    * WordPiece (BERT, MiniLM): every token is at least one character of the normalised text,
      a whole word at most one [UNK]; normalising (accents stripped, lower case) never has
      more characters than the text's canonical decomposition (NFD), which is counted;
    * any other tokenizer: the model's max_tokens (NFKC alone can make one character 18).

    Each adds the special tokens the tokenizer puts around the text ([CLS] and [SEP])."""
    tokenizer = loaded.tokenizer
    bound = token_bound(tokenizer)
    if bound is NO_BOUND:
        return loaded.max_tokens
    texts = [text] if text_pair is None else [text, text_pair]
    count = tokenizer.num_special_tokens_to_add(pair=text_pair is not None)
    for part in texts:
        if bound.form and not part.isascii():
            part = unicodedata.normalize(bound.form, part)
        units = len(part.encode("utf-8", "surrogatepass")) if bound.unit == "byte" else len(part)
        count += units + bound.per_text
    return min(loaded.max_tokens, count)


def token_bound(tokenizer: PreTrainedTokenizerBase) -> TokenBound:
    """Which of estimated_tokens' bounds holds for this tokenizer, read once from its
    pipeline's parts (each part's own JSON: the whole spec is megabytes)."""
    if tokenizer in _BOUNDS:
        return _BOUNDS[tokenizer]
    backend = getattr(tokenizer, "backend_tokenizer", None)
    bound = NO_BOUND
    if backend is not None:
        normalizer = _part(backend.normalizer).get("type")
        pre_tokenizer = json.dumps(_part(backend.pre_tokenizer))
        model = type(backend.model).__name__
        if model == "BPE" and '"ByteLevel"' in pre_tokenizer and normalizer in (None, "NFC"):
            prefix = '"add_prefix_space": true' in pre_tokenizer
            bound = TokenBound("byte", "NFC" if normalizer else "", int(prefix))
        elif model == "WordPiece" and normalizer in (None, "BertNormalizer"):
            bound = TokenBound("character", "NFD")
    _BOUNDS[tokenizer] = bound
    return bound


def _part(part: object) -> dict:
    """A tokenizers pipeline part (normalizer, pre-tokenizer) as its JSON; {} for none."""
    return {} if part is None else json.loads(part.__getstate__())


def token_facts(loaded: LoadedModel, result: ForwardResult) -> TokenFacts:
    """What the statistics need to know of each token, from the forward pass."""
    separators = {loaded.tokenizer.sep_token_id, loaded.tokenizer.eos_token_id} - {None}
    separator = [
        token_id in separators
        or (
            bool(label.strip("␣↵⇥"))
            and all(unicodedata.category(c).startswith("P") for c in label.strip("␣↵⇥"))
        )
        for token_id, label in zip(result.token_ids, result.tokens, strict=True)
    ]
    return TokenFacts(
        special=torch.tensor(result.special, dtype=torch.bool),
        separator=torch.tensor(separator, dtype=torch.bool),
        word=torch.tensor(result.words, dtype=torch.int64),
        ids=torch.tensor(result.token_ids, dtype=torch.int64),
    )
