"""Attention Atlas as a Python library.

- run_model(model, text): any transformers model's tokens and attention maps (torch);
- run_image(image): a vision transformer's maps over an image's patches (torch);
- AtlasClient(url): a running server's answers as numpy arrays (no torch needed);
- show(...): the explorer's views inline in a notebook (Jupyter, JupyterLab, VS Code, Colab);
- show_image(image): a vision transformer's heads over an image, inline.

Names are imported on first use, so `from attention_atlas import AtlasClient` never imports
torch or transformers.
"""

from __future__ import annotations

from importlib import import_module

_WHERE = {
    "run_model": "attention_atlas.run",
    "AttentionRun": "attention_atlas.run",
    "run_image": "attention_atlas.run",
    "ImageRun": "attention_atlas.run",
    "AtlasClient": "attention_atlas.client",
    "AtlasError": "attention_atlas.client",
    "Maps": "attention_atlas.client",
    "decode_maps": "atlas_engine.formats",
    "AttentionWidget": "attention_atlas.widget",
    "show": "attention_atlas.widget",
    "show_image": "attention_atlas.image_widget",
    "ImageWidget": "attention_atlas.image_widget",
}

__all__ = sorted(_WHERE)


def __getattr__(name: str):
    if name not in _WHERE:
        raise AttributeError(f"module 'attention_atlas' has no attribute {name!r}")
    value = getattr(import_module(_WHERE[name]), name)
    globals()[name] = value
    return value
