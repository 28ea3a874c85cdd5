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

import codecs
import json
import re
import stat
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


class CorpusProblem(ValueError):
    """A file of the user's corpus that cannot be read as texts; the message names the file and
    the line, and what is wrong there."""


MAX_LINE_BYTES = 2**20
"""A .jsonl line (one text and its fields) is read only up to this; a longer one is refused."""
MAX_PARAGRAPH_CHARS = 2**16
"""What is kept of a .txt paragraph: far more than a text of 512 tokens needs (a longer
paragraph is cut anyway), so a paragraph of any size costs at most this much memory."""


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


def _lines(path: Path) -> Iterator[tuple[int, str, bool]]:
    """(line number, text, whole) of each line of a user's file, read in bounded pieces: at most
    MAX_LINE_BYTES of a line is kept (whole=False where it was longer; the rest is skipped in
    pieces of that size), decoded as UTF-8 or refused naming the line."""
    decode = codecs.getincrementaldecoder("utf-8")
    with path.open("rb") as file:
        number = 0
        while line := file.readline(MAX_LINE_BYTES + 1):
            number += 1
            whole = line.endswith(b"\n") or len(line) <= MAX_LINE_BYTES
            while not whole and (rest := file.readline(MAX_LINE_BYTES)):
                if rest.endswith(b"\n"):
                    break  # the rest of an over-long line, skipped
            try:
                text = decode().decode(line, final=whole)  # a cut line may end inside a character
            except UnicodeDecodeError as err:
                raise CorpusProblem(
                    f"{path}:{number}: not UTF-8 text (byte 0x{line[err.start]:02x} at byte "
                    f"{err.start + 1} of the line): save the file as UTF-8"
                ) from None
            yield number, text.rstrip("\r\n"), whole


def _regular(path: Path) -> Path:
    """`path`, checked to be a regular file (following links) before anything reads it: a
    device (a link to /dev/zero), a pipe or a socket would be read for ever."""
    try:
        mode = path.stat().st_mode
    except OSError as err:
        raise CorpusProblem(f"{path}: cannot be read ({err.strerror})") from None
    if not stat.S_ISREG(mode):
        raise CorpusProblem(
            f"{path}: not a regular file (a device, a pipe or a socket): give .txt or .jsonl files"
        )
    return path


def plain_paragraphs(path: Path) -> Iterator[str]:
    """A user's file: .txt paragraphs (blank-line separated) or .jsonl "text" fields, read in
    bounded pieces; a line that cannot be read is refused, naming the file and the line."""
    _regular(path)
    if path.suffix == ".jsonl":
        for number, line, whole in _lines(path):
            if not whole:
                raise CorpusProblem(
                    f"{path}:{number}: a line longer than {MAX_LINE_BYTES // 2**20} MiB: give "
                    "each text its own shorter line"
                )
            if line.strip():
                yield from _jsonl_text(path, number, line)
        return
    paragraph: list[str] = []
    size = 0
    for _, line, _ in _lines(path):
        if not line.strip():
            if paragraph:
                yield re.sub(r"\s+", " ", " ".join(paragraph)).strip()
            paragraph, size = [], 0
        elif size < MAX_PARAGRAPH_CHARS:
            paragraph.append(line[: MAX_PARAGRAPH_CHARS - size])
            size += len(paragraph[-1]) + 1
    if paragraph:
        yield re.sub(r"\s+", " ", " ".join(paragraph)).strip()


def _jsonl_text(path: Path, number: int, line: str) -> Iterator[str]:
    """The text of one .jsonl line, or CorpusProblem naming the line."""
    try:
        text = json.loads(line)["text"]
    except (ValueError, KeyError, TypeError, RecursionError):
        raise CorpusProblem(
            f"{path}:{number}: each line must be a JSON object with a 'text'"
        ) from None
    if not isinstance(text, str):
        raise CorpusProblem(f"{path}:{number}: 'text' must be a string")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as err:
        raise CorpusProblem(
            f"{path}:{number}: 'text' holds a lone surrogate (\\u{ord(text[err.start]):04x}), "
            "which is not a character"
        ) from None
    if text.strip():
        yield text.strip()[:MAX_PARAGRAPH_CHARS]


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
    elif path.exists():
        files = [path]  # checked to be a regular file before it is read
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
