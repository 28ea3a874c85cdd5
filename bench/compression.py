"""Bytes a weight and added time per answer for each wire encoding and level, side by side.

    .venv/bin/python -m bench.compression [--repeats N]

The answers are real MiniLM maps (every layer and head) of README prose cut to 128 and 512
tokens, in each of our formats; each is compressed whole with the libraries the server's
middleware (starlette-compress) uses. "net ms" adds the time to send the compressed bytes over a
100 Mbit/s local network, so a level is worth it where its net time is below the plain answer's.
"""

from __future__ import annotations

import argparse
import gzip
import statistics
import time
from pathlib import Path

import brotli
import zstandard

from atlas_engine.inference.forward import run_forward
from atlas_engine.models.loader import load_model
from atlas_engine.models.registry import BUILTIN_MODELS, MINILM_ID
from atlas_engine.serialize import MapsAnswer

LINK_BYTES_PER_SECOND = 100e6 / 8  # a 100 Mbit/s local network
ENCODINGS = {
    "identity": lambda body: body,
    "zstd-1": lambda body: zstandard.ZstdCompressor(level=1).compress(body),
    "zstd-3": lambda body: zstandard.ZstdCompressor(level=3).compress(body),
    "zstd-4": lambda body: zstandard.ZstdCompressor(level=4).compress(body),
    "br-1": lambda body: brotli.compress(body, quality=1),
    "br-4": lambda body: brotli.compress(body, quality=4),
    "gzip-1": lambda body: gzip.compress(body, compresslevel=1),
    "gzip-4": lambda body: gzip.compress(body, compresslevel=4),
    "gzip-6": lambda body: gzip.compress(body, compresslevel=6),
}


def prose(tokenizer, n_tokens: int, start: int = 0) -> str:
    """The project's own prose (README, then docs/) from its `start`-th token on, cut so that
    MiniLM reads exactly n_tokens tokens (with [CLS] and [SEP]); read again from the start if it
    is shorter than that. Another start gives another text of the same length."""
    root = Path(__file__).resolve().parents[1]
    sources = [root / "README.md", *sorted((root / "docs").glob("*.md"))]
    text = "\n".join(path.read_text() for path in sources)
    words = " ".join(line for line in text.splitlines() if line[:1].isalpha())
    ids = tokenizer(words, add_special_tokens=False)["input_ids"]
    for shift in range(64):  # a cut inside a word may read back as other pieces: move on
        at = (start + shift) % len(ids)
        window = ((ids[at:] + ids[:at]) * (1 + (n_tokens - 2) // len(ids)))[: n_tokens - 2]
        text = tokenizer.decode(window)
        if start == 0 or len(tokenizer(text, add_special_tokens=False)["input_ids"]) == len(window):
            return text
    raise ValueError(f"no text of {n_tokens} tokens starts near token {start}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    spec = next(s for s in BUILTIN_MODELS if s.id == MINILM_ID)
    loaded = load_model(
        spec, cache_dir=Path("var/cache"), token_limit=512, progress=lambda *_: None
    )
    print(f"{'tokens':>6} {'format':>11} {'encoding':>9} {'bytes/w':>8} {'MB':>7} "
          f"{'+ms':>7} {'net ms':>7}")  # fmt: skip
    for n in (128, 512):
        result = run_forward(loaded, prose(loaded.tokenizer, n))
        maps = result.all_maps()
        weights = maps.numel()
        for fmt in ("u8", "f16", "f32", "json")[: 4 if n <= 128 else 3]:  # the API refuses
            # 512-token JSON of every layer (over its 4,000,000 weights)
            answer = MapsAnswer({"tokens": result.tokens}, fmt, tuple(maps.shape), maps.__getitem__)
            body = b"".join(answer.chunks())
            plain_net = len(body) / LINK_BYTES_PER_SECOND * 1000
            for name, encode in ENCODINGS.items():
                times = []
                for _ in range(args.repeats):
                    start = time.perf_counter()
                    packed = encode(body)
                    times.append(time.perf_counter() - start)
                ms = statistics.median(times) * 1000 if name != "identity" else 0.0
                net = ms + len(packed) / LINK_BYTES_PER_SECOND * 1000
                mark = (
                    "" if name == "identity" or net < plain_net else "  (costs more than it saves)"
                )
                print(f"{result.seq_len:>6} {fmt:>11} {name:>9} {len(packed) / weights:>8.3f} "
                      f"{len(packed) / 1e6:>7.2f} {ms:>7.1f} {net:>7.1f}{mark}")  # fmt: skip


if __name__ == "__main__":
    main()
