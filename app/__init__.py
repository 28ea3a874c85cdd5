"""Attention Atlas's server: the FastAPI app (main.py), its routes (api/), the web pages (web/)
and what HTTP needs (transport, limits, errors as answers, Server-Timing). What it computes
lives in atlas_engine, which is imported first so that its settings for PyTorch's libraries
(MKL_CBWR) hold before torch loads."""

import atlas_engine  # noqa: F401
