"""Bytes per attention weight on the wire: Atlas's answers, compressed as a browser receives them,
against bertviz's own model_view HTML for the same model and input, measured side by side.

    .venv/bin/python -m bench.bytes_per_weight      (needs `pip install '.[bench]'` for bertviz)

For MiniLM and SmolLM2 on README prose of 128 and 512 tokens: every layer and head, as
bertviz's `model_view(..., html_action="return")` page, and as POST /api/attention answers
(u8, f16, json) with Accept-Encoding zstd (what the server picks for a browser that offers it).
"""

from __future__ import annotations

from bertviz import model_view
from fastapi.testclient import TestClient

from app.main import create_app
from atlas_engine.config import Settings
from atlas_engine.models.registry import MINILM_ID, SMOLLM2_ID
from bench.compression import prose

FORMATS = ("u8", "f16", "json")
SAMPLED_LAYERS = {"u8": None, "f16": range(4), "json": range(1)}
"""Layers asked for in each format (None: all): f16 and JSON answers of every layer pass the
answer limits at 512 tokens, so their rate per weight is read from the first layers."""


def wire_bytes(client: TestClient, body: dict) -> int:
    """Bytes the answer took on the wire (compressed), not after decoding."""
    with client.stream(
        "POST", "/api/attention", json=body, headers={"Accept-Encoding": "zstd"}
    ) as response:
        assert response.status_code == 200, response.read()
        for _ in response.iter_raw():
            pass
        return response.num_bytes_downloaded


def bertviz_bytes(loaded, text: str) -> tuple[int, int]:
    """(bytes of bertviz's model view page, weights it holds) for the model's own maps."""
    import torch

    enc = loaded.tokenizer(text, return_tensors="pt")
    if loaded.causal:
        enc.pop("token_type_ids", None)
    with torch.inference_mode():
        attentions = loaded.model(**enc, output_attentions=True).attentions
    tokens = loaded.tokenizer.convert_ids_to_tokens(enc["input_ids"][0])
    page = model_view(attentions, tokens, html_action="return")
    weights = sum(a.numel() for a in attentions)
    return len(page.data.encode("utf-8")), weights


def main() -> None:
    settings = Settings(preload=[], rate_limit_per_minute=0)
    app = create_app(settings)
    print(f"{'model':>10} {'tokens':>6} {'weights':>10} {'bertviz B/w':>11} "
          + " ".join(f"{f + ' B/w':>9} {'x':>6}" for f in FORMATS))  # fmt: skip
    with TestClient(app) as client:
        for model_id in (MINILM_ID, SMOLLM2_ID):
            loaded = app.state.manager.get(model_id)
            for n in (128, 512):
                text = prose(loaded.tokenizer, n)
                page, weights = bertviz_bytes(loaded, text)
                row = f"{model_id.split('/')[1][:10]:>10} {n:>6} {weights:>10,} {page / weights:>11.2f}"
                for fmt in FORMATS:
                    layers = SAMPLED_LAYERS[fmt] or range(loaded.arch.num_layers)
                    body = {"model": model_id, "text": text, "format": fmt, "layers": list(layers)}
                    asked = weights * len(layers) / loaded.arch.num_layers
                    per = wire_bytes(client, body) / asked
                    row += f" {per:>9.3f} {page / weights / per:>5.0f}x"
                print(row, flush=True)


if __name__ == "__main__":
    main()
