"""Schemas of POST /api/attention/generate: a decoder continues the text, token by token."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from atlas_engine.schemas.attention import EXAMPLE_TEXT, TextRequest
from atlas_engine.schemas.common import Seed, json_int

MAX_NEW_TOKENS = 128
MAX_SAMPLE_TOP_K = 1000
# A floor on the temperature: near 0, logits / temperature overflow to infinity and softmax
# gives NaN (a temperature of 2e-313 broke the stream); at 1e-6 sampling is all but greedy.
MIN_SAMPLE_TEMPERATURE = 1e-6


class GenerateRequest(TextRequest):
    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {
                    "model": "HuggingFaceTB/SmolLM2-135M-Instruct",
                    "text": EXAMPLE_TEXT,
                    "max_new_tokens": 16,
                    "strategy": "greedy",
                },
                {
                    "model": "HuggingFaceTB/SmolLM2-135M-Instruct",
                    "text": "Once upon a time",
                    "max_new_tokens": 24,
                    "strategy": "sample",
                    "temperature": 0.8,
                    "top_k": 50,
                    "seed": 7,
                },
            ]
        }
    )

    max_new_tokens: json_int(ge=1, le=MAX_NEW_TOKENS) = Field(
        16, description="Tokens to add; prompt plus these must fit the model's max_tokens."
    )
    strategy: Literal["greedy", "sample"] = Field(
        "greedy", description="greedy: the most likely token; sample: drawn at `temperature`."
    )
    temperature: float = Field(
        1.0,
        ge=MIN_SAMPLE_TEMPERATURE,
        le=100,
        allow_inf_nan=False,
        description="sample only: logits divided by it, in [1e-6, 100]",
    )
    top_k: json_int(ge=1, le=MAX_SAMPLE_TOP_K) | None = Field(
        None, description="sample only: draw from this many most likely tokens (null: all)"
    )
    seed: Seed = Field(0, description="sample only: the same seed continues the same way")


class GeneratedToken(BaseModel):
    """One line of the stream per new token."""

    event: Literal["token"]
    index: int = Field(description="0 for the first new token")
    prompt_tokens: int = Field(
        ge=1,
        description="Tokens of the prompt, the same on every line: a client that stops the "
        "stream early still knows which positions of its text are new",
    )
    token_id: int
    token: str = Field(description="As displayed (␣ marks a leading space)")
    probability: float = Field(
        ge=0,
        le=1,
        description="The model's probability of this token at the step that chose it: the "
        "softmax of that step's own logits (computed with the key/value cache, as transformers' "
        "generate() computes them), computed in float64 from them. A full pass over the same "
        "tokens without the cache rounds differently: within 1e-4 of this.",
    )
    continuation: str = Field(description="The new text so far")


class GenerationDone(BaseModel):
    """The stream's last line."""

    event: Literal["done"]
    text: str = Field(description="The prompt followed by the continuation: open it in any view")
    prompt_tokens: int = Field(description="Tokens of the prompt: later positions are new")
    generated: int
    stopped: Literal["length", "end_of_text", "characters"] = Field(
        description="length: max_new_tokens reached; end_of_text: the model ended the text; "
        "characters: the text reached the character limit of a request"
    )
    exact: bool = Field(
        description="true when `text` tokenises back into exactly the prompt's and the "
        "generated tokens, so the maps of `text` are the attention of the generation itself"
    )
