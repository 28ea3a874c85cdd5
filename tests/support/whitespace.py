"""What counts as whitespace to Python's str.isspace() or JavaScript's \\s, by code point."""

import sys
import unicodedata

JS_WHITESPACE = {"\t", "\n", "\v", "\f", "\r", "\u2028", "\u2029", "\ufeff"}  # and category Zs


def blank(char: str) -> bool:
    """Whitespace to Python or to JavaScript's \\s."""
    return char.isspace() or char in JS_WHITESPACE or unicodedata.category(char) == "Zs"


def every_char() -> list[str]:
    """Every Unicode scalar value (every code point but the surrogates), in order."""
    return [chr(c) for c in range(sys.maxunicode + 1) if not 0xD800 <= c <= 0xDFFF]


BLANKS = [c for c in every_char() if blank(c)]
