"""Where a corpus's texts come from, cut into sequences of at most N tokens of a model.

- "python-docs": the English prose of the Python documentation, from Debian's `python3-doc`
  (PSF licence: free to redistribute with its notice; `make corpus` installs it). Its reST
  sources (`_sources/**/*.rst.txt`) are read paragraph by paragraph; code blocks, directives,
  tables and headings are left out, and inline markup is reduced to its text. About 1.2 million
  words of modern technical English, no network needed once installed.
- a `.txt` file (paragraphs separated by blank lines) or a `.jsonl` file (one JSON object a
  line, its "text" field), or a folder of them: the user's own texts.

Paragraphs are packed in order into sequences up to the token budget (a paragraph longer than
it is cut at a word boundary), so every sequence is real running text and each is stored as the
text itself: the model reads exactly what is stored.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator
from pathlib import Path

PYTHON_DOCS = Path("/usr/share/doc/python3-doc/html/_sources")
CORPORA = {"python-docs": PYTHON_DOCS}
"""Corpora known by name: name -> where they are installed."""

_ROLE = re.compile(r":[a-z:]+:`~?!?([^`<]*?)(?:\s*<[^>]*>)?`")  # :func:`name <target>` -> name
_LITERAL = re.compile(r"``([^`]*)``")
_LINK = re.compile(r"`([^`<]*?)\s*<[^>]*>`_+")
_EMPHASIS = re.compile(r"\*{1,2}([^*]+)\*{1,2}")
_UNDERLINE = re.compile(r"^([=\-~^\"'`#*+])\1{3,}\s*$")


class CorpusMissing(Exception):
    """A corpus named or given that is not on this machine; the message says how to get it."""


def reduce_markup(text: str) -> str:
    """reST inline markup reduced to the text a reader sees."""
    for pattern in (_ROLE, _LITERAL, _LINK, _EMPHASIS):
        text = pattern.sub(r"\1", text)
    text = text.replace("\\", "").replace("::", ":")  # "as follows::" introduces code
    return re.sub(r"\s+", " ", text).strip()


def rest_paragraphs(source: str) -> Iterator[str]:
    """The prose paragraphs of a reST document: blocks of unindented lines that are not
    directives, comments, headings, lists of options or tables, with a sentence's shape."""
    for block in re.split(r"\n\s*\n", source):
        lines = block.splitlines()
        if not lines or lines[0][:1].isspace() or lines[0].startswith(".."):
            continue  # a code block, a directive's body or a directive
        if any(_UNDERLINE.match(line) for line in lines) or lines[0].startswith(("|", "+-", "=")):
            continue  # a heading or a table
        if lines[0].lstrip().startswith(("* ", "- ", "#. ", ">>>")):
            continue  # lists and interactive examples: not running prose
        text = reduce_markup(" ".join(lines))
        words = text.split()
        if (
            len(words) >= 8
            and text[-1:] in ".?!:"
            and sum(w.isalpha() for w in words) > len(words) / 2
        ):
            yield text


def plain_paragraphs(path: Path) -> Iterator[str]:
    """A user's file: .txt paragraphs (blank-line separated) or .jsonl "text" fields."""
    if path.suffix == ".jsonl":
        with path.open(encoding="utf-8") as lines:
            for number, line in enumerate(lines, 1):
                if not line.strip():
                    continue
                try:
                    text = json.loads(line)["text"]
                except (ValueError, KeyError, TypeError):
                    raise CorpusMissing(
                        f"{path}:{number}: each line must be a JSON object with a 'text'"
                    ) from None
                if isinstance(text, str) and text.strip():
                    yield text.strip()
        return
    for block in re.split(r"\n\s*\n", path.read_text(encoding="utf-8")):
        if block.strip():
            yield re.sub(r"\s+", " ", block).strip()


def paragraphs(corpus: str) -> Iterator[str]:
    """Every paragraph of a corpus, by name ("python-docs") or path, in a stable order."""
    known = CORPORA.get(corpus)
    if known is not None:
        if not known.is_dir():
            raise CorpusMissing(
                f"the corpus {corpus!r} is not installed: `make corpus` installs it "
                "(Debian's python3-doc, the Python documentation under the PSF licence)"
            )
        for path in sorted(known.rglob("*.rst.txt")):
            yield from rest_paragraphs(path.read_text(encoding="utf-8", errors="replace"))
        return
    path = Path(corpus)
    if path.is_dir():
        files = sorted(p for p in path.rglob("*") if p.suffix in (".txt", ".jsonl"))
    elif path.is_file():
        files = [path]
    else:
        raise CorpusMissing(
            f"no corpus named {corpus!r} and no such file or folder ({', '.join(CORPORA)} are known)"
        )
    for file in files:
        yield from plain_paragraphs(file)


def sequences(
    texts: Iterator[str], count_tokens: Callable[[str], int], budget: int, limit: int
) -> Iterator[str]:
    """Paragraphs packed in order into texts of at most `budget` tokens (count_tokens counts
    them as the model will, specials included), at most `limit` of them."""
    made = 0
    current = ""
    for paragraph in texts:
        candidate = f"{current}\n\n{paragraph}" if current else paragraph
        if count_tokens(candidate) <= budget:
            current = candidate
            continue
        if current:
            yield current
            made += 1
            if made >= limit:
                return
        current = (
            paragraph
            if count_tokens(paragraph) <= budget
            else _cut(paragraph, count_tokens, budget)
        )
    if current and made < limit:
        yield current


def _cut(paragraph: str, count_tokens: Callable[[str], int], budget: int) -> str:
    """The longest run of whole words from the paragraph's start within the budget."""
    words = paragraph.split(" ")
    lo, hi = 1, len(words)
    while lo < hi:  # the largest n with count(words[:n]) <= budget
        mid = (lo + hi + 1) // 2
        if count_tokens(" ".join(words[:mid])) <= budget:
            lo = mid
        else:
            hi = mid - 1
    return " ".join(words[:lo])
