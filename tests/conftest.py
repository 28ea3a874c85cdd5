"""Shared fixtures. Nothing here touches the network: HF_HUB_OFFLINE is forced on."""

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
