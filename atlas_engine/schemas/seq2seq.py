"""POST /api/attention/decoder: an encoder-decoder's decoder self-attention and cross-attention,
one decoder layer at a time."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, field_validator

from atlas_engine.schemas.attention import MAX_TEXT_CHARS, TextRequest, check_text
from atlas_engine.schemas.common import NOT_BLANK, Index

Grid = list[list[float]]


class DecoderRequest(TextRequest):
    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {
                    "model": "local/t5-small",
                    "text": "translate English to German: The house is wonderful.",
                    "target": "Das Haus ist wunderbar.",
                    "layer": 0,
                }
            ]
        }
    )

    target: str = Field(
        description="The text the decoder learns to write. It reads it teacher-forced: its "
        "start token, then the target's tokens (as the tokenizer writes labels) but the last. "
        f"At most {MAX_TEXT_CHARS} characters, and the model's full_map_tokens tokens.",
        max_length=MAX_TEXT_CHARS,
        json_schema_extra={"minLength": 1, "pattern": NOT_BLANK},
    )
    layer: Index = Field(0, description="The decoder layer (0-based, below its count).")
    text_pair: None = Field(
        None, description="Not taken: an encoder-decoder reads one input text and a target."
    )

    @field_validator("target")
    @classmethod
    def _target_ok(cls, v: str) -> str:
        return check_text(v, "target")


class DecoderResponse(BaseModel):
    model: str
    tokens: list[str] = Field(description="The input's tokens (the encoder's): cross's keys")
    target_tokens: list[str] = Field(
        description="What the decoder reads (its start token, then the target's but the last): "
        "every map's queries, and the decoder map's keys"
    )
    target_special: list[bool]
    layer: int
    num_layers: int = Field(description="The decoder's layers")
    num_heads: int
    decoder: list[Grid] = Field(description="(heads, S, S): the decoder's self-attention (causal)")
    cross: list[Grid] = Field(
        description="(heads, S, T): each target token's attention over the input's tokens"
    )
