"""Schemas of GET /api/corpus...: what a corpus job found about every head."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field


class CorpusRun(BaseModel):
    id: int
    model: str
    corpus: str = Field(description="The corpus's name (python-docs) or the path it was read from")
    sequence_tokens: int = Field(description="Tokens a text at most")
    planned: int = Field(description="Texts the job cut from the corpus")
    done: int = Field(description="Texts finished so far (a job resumes with the rest)")
    statistics: list[str] = Field(
        description="Atlas's per-text statistics (empty for a run imported from a HeadVis tree)"
    )
    layers: int
    heads: int
    source: Literal["atlas", "headvis"] = Field(
        "atlas",
        description="atlas: described here by the corpus job; headvis: imported from a HeadVis "
        "data tree (HeadVis's numbers only, no texts)",
    )


BackgroundState = Literal[
    "queued", "waiting", "loading", "planning", "running", "done", "failed", "stopped"
]


class BackgroundProgress(BaseModel):
    """Where the corpus job the server runs beside its requests stands on one model."""

    model: str
    state: Literal[
        "queued", "waiting", "loading", "planning", "running", "done", "failed", "stopped"
    ] = Field(
        description="queued (another model goes first), waiting (for the corpus to be "
        "installed), loading, planning (cutting the corpus into texts), running, done, failed "
        "(detail says why), stopped (the server is stopping; its next start goes on)"
    )
    done: int = Field(description="Texts finished, in this run and earlier ones")
    planned: int = Field(description="Texts in the run (0 until it is planned)")
    tokens_per_second: float | None = Field(description="Over this server's texts so far")
    seconds_left: float | None = Field(description="At that rate, for the texts not done")
    detail: str = Field(description="What it waits for, or why it failed")


class CorpusRuns(BaseModel):
    runs: list[CorpusRun]
    store: str = Field(description="The SQLite file the server reads")
    background: list[BackgroundProgress] = Field(
        description="The corpus job this server runs beside its requests (ATLAS_CORPUS_TEXTS; "
        "`make run` starts one), a row a model; empty where it runs none"
    )
    problem: str | None = Field(
        None,
        description="Set where the store could not be read since the server started: it was "
        "moved aside (where to is said) and a new one starts empty",
    )


class CorpusHeads(BaseModel):
    run: CorpusRun
    statistics: dict[str, list[list[float | None]]] = Field(
        description="[statistic][layer][head]: the mean over the corpus's texts (null: no text "
        "has a row that counts)"
    )
    spread: dict[str, list[list[float | None]]] = Field(
        description="[statistic][layer][head]: the standard deviation over texts"
    )
    roles: list[list[list[str]]] = Field(
        description="[layer][head]: the roles the corpus means pass (the explorer's thresholds)"
    )
    headvis: list[str] = Field(
        description="Which keys of `statistics` are HeadVis's own metrics, pooled over every "
        "row of the run (self_attention_score ... induction_score; no spread over texts)"
    )


class HeadText(BaseModel):
    idx: int = Field(description="The text's number in the run")
    decile: int = Field(description="0 (lowest tenth of the texts by the metric) to 9")
    value: float
    text: str


class TokenCount(BaseModel):
    token_id: int
    token: str
    weight: float = Field(description="Attention summed over the texts (each text's top tokens)")
    texts: int = Field(description="Texts where it was among the head's top tokens")


class Histogram(BaseModel):
    edges: list[float] = Field(description="Bin edges (one more than counts)")
    counts: list[int]


class HeadDashboard(BaseModel):
    run: CorpusRun
    layer: int
    head: int
    metric: str = Field(description="The statistic the texts are ranked by")
    statistics: dict[str, float | None] = Field(description="Each statistic's corpus mean")
    roles: list[str]
    histograms: dict[str, Histogram] = Field(description="Each statistic over the texts")
    texts: list[HeadText] = Field(description="Texts by decile of the metric, highest first")
    to_tokens: list[TokenCount] = Field(description="The tokens it reads most")
    from_tokens: list[TokenCount] = Field(description="The tokens that read most sharply")
    distance_edges: list[int]
    distance: list[float] = Field(
        description="The share of its attention at each distance bin (sums to 1)"
    )


class HeadVisBins(BaseModel):
    bin_edges: list[float] = Field(description="One more than bin_values")
    bin_values: list[float]


class HeadVisToken(BaseModel):
    token: str = Field(description="The token's text, decoded alone")
    weight: float = Field(description="Kept attention summed over the sampled sequences")


class HeadVisSequence(BaseModel):
    sequence_id: int = Field(description="The sequence's rank in the run")
    interval: int = Field(description="Its interval of max_activation, 1 (lowest) .. n_intervals")
    tokens: list[str]
    attention_indices: list[int] = Field(description="Flat q · L + k of each kept weight")
    attention_values: list[float] = Field(description="The kept weights (top-k a row)")
    seq_len: int
    max_activation: float = Field(description="Its largest weight with row 0 and column 0 left out")
    text: str | None = Field(
        None, description="The text itself where the run kept it (not in an imported tree)"
    )


class HeadVisHead(BaseModel):
    """One head as HeadVis shows it: its six metrics and its head file's blocks."""

    run: CorpusRun
    layer: int
    head: int
    metrics: dict[str, float | None] = Field(
        description="HeadVis's six metrics of this head (null: undefined on this run)"
    )
    n_intervals: int
    causal: bool = Field(description="False for an encoder: keys after the query are kept too")
    sequences: list[HeadVisSequence] = Field(
        description="The sampled sequences, lowest interval first, the top one highest first"
    )
    qk_distance_histogram: HeadVisBins | None = Field(
        description="Kept attention mass of the samples by |q - k| (bins 0, 1, 2-3, 4-7 ...)"
    )
    top_query_tokens: list[HeadVisToken]
    top_key_tokens: list[HeadVisToken]
    histogram: HeadVisBins | None = Field(
        description="Sequences of the whole run by max_activation (50 bins on [0, 1])"
    )
    n_samples: int
    mean_max_activation: float | None
