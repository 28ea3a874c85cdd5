"""Schemas of POST /api/attention/heads: what every head of a model does on a text."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from atlas_engine.config import TOKEN_LIMIT_CEILING
from atlas_engine.schemas.attention import EXAMPLE_TEXT, LayerList, TextRequest
from atlas_engine.schemas.common import index_list
from attention_core.head_stats import ROLES, STATISTICS

MarkedList = index_list(
    TOKEN_LIMIT_CEILING, "Token positions", "with them the answer adds the statistic 'marked'."
)
ReaderList = index_list(TOKEN_LIMIT_CEILING, "Query positions", "with `marked` only.")
MARKED = "marked"
MARKED_LABEL = "marked tokens"
MARKED_DESCRIPTION = (
    "share of attention on the marked tokens, averaged over the rows that read them from "
    "elsewhere (not marked themselves; in a decoder, after the first marked token)"
)
READERS_DESCRIPTION = (
    "share of attention on the marked tokens, averaged over the chosen query rows (read from "
    "the row that asks for a passage, retrieval heads give it most of their attention)"
)


class HeadsRequest(TextRequest):
    """The text to look at; every head of the layers asked for (all by default) is described.
    A client can ask a layer at a time to fill a view as each arrives: a long text's
    statistics take a while (they are computed a block of query rows at a time)."""

    model_config = ConfigDict(
        json_schema_extra={
            "examples": [{"model": "HuggingFaceTB/SmolLM2-135M-Instruct", "text": EXAMPLE_TEXT}],
            "dependentRequired": {"read_from": ["marked"]},  # the rows that read marked tokens
        }
    )

    layers: LayerList | None = Field(None, description="Which layers (all by default).")
    marked: MarkedList | None = Field(
        None,
        description="Tokens to measure each head's attention to (a passage, a word found in a "
        f"long text): the statistic '{MARKED}', {MARKED_DESCRIPTION}. Each below the text's "
        "token count.",
    )
    read_from: ReaderList | None = Field(
        None,
        description=f"The query rows that '{MARKED}' averages instead (the last token of a "
        "question about the passage, say); each below the text's token count.",
    )


class HeadRole(BaseModel):
    role: str = Field(description=f"one of {list(ROLES)}")
    score: float = Field(description="the statistic that decided it (a share of attention, 0-1)")


class RoleRule(BaseModel):
    statistic: str
    threshold: float


class ClearestRole(BaseModel):
    """The head a viewer opens first on this text: of every head's roles past their thresholds
    (first-token (sink) and broad aside: most heads of a trained model have them), the score
    that is the largest multiple of its role's threshold; ties go to the earlier head."""

    layer: int
    head: int
    role: str = Field(description=f"one of {list(ROLES)}")
    statistic: str = Field(description="the statistic that decided the role")
    score: float = Field(description="the head's value of that statistic")
    threshold: float = Field(description="the value the role needs")


StatisticGrid = list[list[float | None]]


class HeadsResponse(BaseModel):
    """statistics[name][i][head]: one number per head of layer layers[i], a mean over query
    rows; null where no query row qualifies (induction and duplicate-token need a repeated
    token, same_word a word of several pieces). roles[i][head]: the head's roles, strongest
    first."""

    model: str
    tokens: list[str]
    num_layers: int
    num_heads: int
    num_kv_heads: int
    causal: bool
    layers: list[int] = Field(description="the layers described, in the order of the grids' rows")
    statistics: dict[str, StatisticGrid] = Field(
        description=f"keys: {list(STATISTICS)}, and '{MARKED}' where the request marks tokens"
    )
    descriptions: dict[str, str] = Field(description="what each statistic measures")
    labels: dict[str, str] = Field(
        description="how the pages name each statistic ('same word' for same_word)"
    )
    roles: list[list[list[HeadRole]]]
    rules: dict[str, RoleRule] = Field(description="role -> the statistic and threshold it needs")
    clearest: ClearestRole | None = Field(
        description="the head with the clearest specific role among the layers described; "
        "null where no head has one"
    )
    compute_ms: float = Field(description="time to compute all statistics from the forward pass")
