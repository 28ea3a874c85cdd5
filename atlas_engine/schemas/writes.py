"""Schemas of what heads write: POST /api/attention/lens (the logit lens),
/api/attention/attribution (direct logit attribution) and /api/attention/patching (patching
from a second text)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from atlas_engine.schemas.attention import MAX_TEXT_CHARS, NOT_BLANK, TextRequest, check_text
from atlas_engine.schemas.common import Index, StrictModel, json_int
from atlas_engine.schemas.predictions import Candidate

MAX_LENS_TOP_K = 10
MAX_LENS_CELLS = 200_000
"""Candidates a lens answer holds at most: (layers + 1) × positions × top_k."""
MAX_WRITES_TOKENS = 256
"""Tokens of a lens or attribution text: the pass taken apart holds ~5 × layers × tokens ×
d_model numbers (88 MB for SmolLM2 at 256)."""
MAX_PATCH_TOKENS = 64
"""Tokens of a patching text: exact patching of the stream reruns the text once per layer and
position (1,920 SmolLM2 passes at 64)."""
SMOL = "HuggingFaceTB/SmolLM2-135M-Instruct"
EIFFEL = "The Eiffel Tower is in the city of"
IOI_CLEAN = "When Mary and John went to the store, John gave a drink to"
IOI_CORRUPTED = "When Mary and John went to the store, Mary gave a drink to"


class TokenById(StrictModel):
    id: json_int(ge=0) = Field(description="The token's id in the vocabulary.")


class TokenByText(StrictModel):
    text: str = Field(
        min_length=1,
        max_length=64,
        description="The token as text, leading space included (' Paris'); it must be exactly "
        "one token of the model's tokenizer.",
    )


TokenChoice = TokenById | TokenByText
"""A token, by its id or by its text (one of the two, never both)."""


class ChosenToken(BaseModel):
    token_id: int
    token: str = Field(description="The token as displayed (␣ marks a leading space)")


class LensRequest(TextRequest):
    model_config = ConfigDict(
        json_schema_extra={"examples": [{"model": SMOL, "text": EIFFEL, "top_k": 5}]}
    )

    top_k: json_int(ge=1, le=MAX_LENS_TOP_K) = Field(5, description="Candidates per cell.")
    positions: list[Index] | None = Field(
        None,
        min_length=1,
        max_length=MAX_WRITES_TOKENS,
        description="The positions to read (the columns), each once; every predicted position "
        "by default. The lens costs about 6 forward passes a position on SmolLM2 (each layer's "
        "stream goes through the whole unembedding), so a long text reads faster a few at a time.",
        json_schema_extra={"uniqueItems": True},
    )
    token: TokenChoice | None = Field(
        None,
        description="The token whose probability and rank every cell gives; by default the "
        "model's own top guess at the last predicted position.",
    )

    @field_validator("positions")
    @classmethod
    def _distinct(cls, positions: list[int] | None) -> list[int] | None:
        if positions is not None and len(set(positions)) != len(positions):
            raise ValueError("positions must be distinct")
        return positions


class LensResponse(BaseModel):
    model: str
    tokens: list[str]
    predicts: Literal["next_token", "masked"] = Field(
        description="next_token: every position, read as the next token's guess; masked: the "
        "text's mask tokens only"
    )
    positions: list[int] = Field(description="The positions read (the columns).")
    rows: list[str] = Field(
        description="What each row reads: 'embeddings', then 'after layer l' for every layer"
    )
    final_norm: str | None = Field(
        description="The module every row goes through before the head (the model's final "
        "norm), or null where the head reads the last layer directly"
    )
    top_k: int
    top: list[list[list[Candidate]]] = Field(
        description="[row][position]: the top-k. Every probability is the softmax of the row's "
        "logits as the model's own final norm and head compute them, within 1e-6 of its exact "
        "value (the last row's logits are the model's own)."
    )
    token: ChosenToken
    token_probability: list[list[float]] = Field(description="[row][position]")
    token_rank: list[list[int]] = Field(description="[row][position]: 1 = the most likely")


class HeadSource(StrictModel):
    layer: Index
    head: Index


class AttributionRequest(TextRequest):
    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {"model": SMOL, "text": EIFFEL},
                {
                    "model": SMOL,
                    "text": IOI_CLEAN,
                    "target": {"text": " Mary"},
                    "contrast": {"text": " John"},
                    "source": {"layer": 23, "head": 3},
                },
            ]
        }
    )

    position: Index | None = Field(
        None, description="The position whose next-token logit is explained; the last by default."
    )
    target: TokenChoice | None = Field(
        None, description="The token whose logit is explained; the model's top guess by default."
    )
    contrast: TokenChoice | None = Field(
        None,
        description="A second token: then the logit difference target - contrast is explained.",
    )
    source: HeadSource | None = Field(
        None, description="A head whose contribution is also split by the key it read."
    )


class SourceSplit(BaseModel):
    layer: int
    head: int
    values: list[float] = Field(
        description="[key position]: weight × the key's value through the output projection, "
        "read along the logit direction; sums to the head's cell in `heads`"
    )
    weights: list[float] = Field(description="[key position]: the head's attention row")


class AttributionResponse(BaseModel):
    model: str
    tokens: list[str]
    position: int
    target: ChosenToken
    contrast: ChosenToken | None
    candidates: list[Candidate] = Field(description="The model's own top-10 at the position.")
    logit: float = Field(description="The real logit (difference), before any final softcap.")
    total: float = Field(
        description="The sum of every contribution below: equals `logit` to float32 rounding"
    )
    embeddings: float = Field(description="What the embeddings contribute directly.")
    heads: list[list[float]] = Field(description="[layer][head]: each head's direct effect.")
    attention_bias: list[float] = Field(
        description="[layer]: the output projection's bias (through any norm on the "
        "attention's output)"
    )
    mlps: list[float] = Field(description="[layer]: the rest of each block (its MLP).")
    bias: float = Field(description="The final norm's beta and the unembedding's bias.")
    convention: str = Field(description="How the contributions are defined, in a sentence.")
    source: SourceSplit | None


class PatchingRequest(TextRequest):
    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {
                    "model": SMOL,
                    "text": "The capital of France is",
                    "corrupted": "The capital of Italy is",
                    "components": "heads",
                },
                {
                    "model": SMOL,
                    "text": IOI_CLEAN,
                    "corrupted": IOI_CORRUPTED,
                    "target": {"text": " Mary"},
                    "contrast": {"text": " John"},
                },
            ]
        }
    )

    corrupted: str = Field(
        description="The corrupted text: as many tokens as `text` (the clean one), position by "
        f"position (at most {MAX_PATCH_TOKENS} tokens).",
        max_length=MAX_TEXT_CHARS,
        json_schema_extra={"minLength": 1, "pattern": NOT_BLANK},
    )
    position: Index | None = Field(
        None, description="Where the metric is read; the last position by default."
    )
    target: TokenChoice | None = Field(
        None, description="The metric is logit(target) - logit(contrast); by default the clean "
        "text's top guess",
    )  # fmt: skip
    contrast: TokenChoice | None = Field(
        None, description="By default the corrupted text's top guess."
    )
    components: Literal["heads", "stream", "both"] = Field(
        "both",
        description="heads: each head's output; stream: the residual stream after each layer at "
        "each position",
    )

    @field_validator("corrupted")
    @classmethod
    def _corrupted_ok(cls, v: str) -> str:
        return check_text(v, "corrupted")


class PatchingResponse(BaseModel):
    model: str
    tokens: list[str] = Field(description="The clean text's tokens.")
    corrupted_tokens: list[str]
    differ: list[int] = Field(description="Positions whose tokens differ.")
    position: int
    target_id: int
    target: str = Field(description="The metric's first token, as displayed")
    contrast_id: int
    contrast: str = Field(description="Its second token: metric = logit(target) - logit(contrast)")
    clean: float = Field(description="The metric on the clean text.")
    corrupted: float = Field(description="The metric on the corrupted text.")
    method: Literal["attribution", "exact"] = Field(
        description="attribution: gradient × (clean - corrupted), one forward and one backward "
        "pass; exact: the corrupted text rerun with each component copied from the clean run"
    )
    heads: list[list[float]] | None = Field(
        description="[layer][head]: the share of clean - corrupted recovered (1: all of it)"
    )
    stream: list[list[float]] | None = Field(
        description="[layer][position]: the same for the stream after each layer"
    )
    passes: int = Field(description="Forward passes run for this answer, batched ones counted.")
