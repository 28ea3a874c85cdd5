"""The explorer's views, grouped by the question they answer: the one list the tabs, the
page's state (each view's URL fields), the notebook widget's list and the lab's links back read.

A view is this row, its module static/js/views/<name>.js and its panel templates/views/<name>.html.

A newcomer meets the groups first (two rows of choices at most, whatever the width): the
everyday views lead each group, and the rest are one click away.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Field:
    """One piece of the page's state kept in the URL (static/js/state.js reads these)."""

    key: str  # the state's key
    param: str  # the URL parameter
    type: str  # "text", "int", "number", "flag", "ints" (a comma list) or "choice"
    default: object = None  # left out of a link while it holds this
    choices: tuple[str, ...] = ()  # a "choice"'s values; anything else is not read


def text(key: str, param: str, default: object = "") -> Field:
    return Field(key, param, "text", default)


# The page's own fields, every view's: the text, the head, the view shown, the colour scale.
# The model's and the text's defaults are the page's (pages.py).
PAGE_FIELDS: tuple[Field, ...] = (
    text("model", "model", None),
    text("text", "text", None),
    text("textPair", "pair"),
    Field("layer", "layer", "int"),
    Field("head", "head", "int"),
    text("view", "view", "heatmap"),
    # every map of weights: Heatmap, Follow, Average, Ablation, Compare
    Field("colours", "colours", "choice", "linear", ("linear", "log")),
    Field("query", "q", "int"),
    # tokens of the prompt, when the text ends in a generated continuation
    Field("generated", "gen", "int"),
)


@dataclass(frozen=True)
class Group:
    label: str
    question: str  # the one line under the row of views


@dataclass(frozen=True)
class View:
    label: str
    group: str
    summary: str  # one line: what it shows (the tab's tooltip)
    labs: tuple[str, ...] = ()  # the lab topics that teach it, by slug
    fields: tuple[Field, ...] = ()  # its own state in the URL
    # What the notebook widget needs to offer it (attention_atlas/widget.py): "maps" (any maps),
    # "replay" (a model's weights) or "writes" (its predictions); "" where it does not.
    widget: str = ""
    # Whether it reads the token a click on the text chooses: such a click keeps it shown, and
    # opens the first view that does from any other.
    token: bool = False


GROUPS: dict[str, Group] = {
    "look": Group("Look at a head", "Where does one head send each token's attention?"),
    "find": Group("Find heads", "Which heads do what, across every layer?"),
    "token": Group("Follow a token", "What does one token read, and who reads it?"),
    "explain": Group("Explain the numbers", "How does a head compute its weights?"),
    "why": Group(
        "Why heads attend",
        "Why does this head attend to this key, and which heads work together?",
    ),
    "intervene": Group("Intervene", "What changes when a head or the text changes?"),
    "writes": Group("What heads write", "Which heads push the model toward its answer?"),
}

VIEWS: dict[str, View] = {
    "heatmap": View(
        "Heatmap",
        "look",
        "queries down, keys across, each weight a cell",
        ("what-a-head-is",),
        widget="maps",
    ),
    "lines": View(
        "Token to token",
        "look",
        "lines from each token to those it attends to",
        fields=(
            Field("overlay", "heads", "ints"),  # the heads drawn together
            Field("threshold", "min", "number", 0.05),  # lines below this weight are hidden
        ),
        widget="maps",
    ),
    "qkspace": View(
        "Q-K space",
        "look",
        "queries and keys in one plane: near means attended",
        fields=(text("qkScope", "qks", "head"), text("qkMethod", "qkm", "pca")),  # or layer, umap
        widget="replay",
    ),
    "grid": View(
        "All heads", "find", "every layer and head as small maps", ("heads",), widget="maps"
    ),
    "heads": View(
        "Head roles",
        "find",
        "each head's statistics and the roles they imply",
        # the statistic mapped over layers and heads; the table's sort, "-" first for descending
        fields=(text("stat", "stat", "previous"), text("sort", "sort")),
    ),
    "search": View(
        "Search",
        "find",
        "heads by a weight, a role, a statistic or a span",
        # "role:<role>", "rank:<statistic>:<order>" or "pair:<q>:<k>:<p>"
        fields=(text("find", "find", "role:previous-token"),),
    ),
    "similarity": View(
        "Similar heads",
        "find",
        "which heads draw the same pattern",
        fields=(text("order", "order", "cluster"),),  # or "layer"
    ),
    "follow": View(
        "Layer by layer",
        "token",
        "one token as a query and as a key, every layer",
        fields=(text("summary", "sum", "mean"),),  # each layer's heads "mean" or "max"
        token=True,
    ),
    "aggregate": View(
        "Average & rollout",
        "token",
        "a layer's heads averaged; rollout through layers",
        # "average" or "rollout"; the rollout's identity share
        fields=(text("agg", "agg", "average"), Field("residual", "res", "number", 0.5)),
        token=True,
    ),
    # Not in the first group: no model Atlas ships is an encoder-decoder (docs/models.md).
    "decoder": View(
        "Decoder & cross",
        "token",
        "an encoder-decoder's decoder, and its attention to the input",
        # what the decoder reads; the decoder layer shown
        fields=(text("target", "tg"), Field("decoderLayer", "dl", "int", 0)),
    ),
    "qk": View(
        "Query · Key",
        "explain",
        "a token's query against every key",
        ("step-by-step", "scoring"),
        widget="replay",
        token=True,
    ),
    "steps": View(
        "Step by step",
        "explain",
        "QKᵀ, scale, mask, softmax, × V",
        ("step-by-step",),
        widget="replay",
    ),
    "mask": View(
        "Mask", "explain", "the mask the model used, before and after softmax", ("masks", "padding")
    ),
    "whatif": View(
        "Without √d",
        "explain",
        "the head without its 1/√d scale",
        ("scaling",),
        # remove the 1/√d scale; the counterfactual temperature
        fields=(
            Field("unscaled", "noscale", "flag", True),
            Field("temperature", "temp", "number", 1),
        ),
    ),
    "value": View(
        "Value-weighted", "explain", "what each key really passes on: ‖α·v‖", widget="replay"
    ),
    "trace": View(
        "Trace a score",
        "why",
        "why a head attends to a key: the score taken apart into the pieces that made it",
        fields=(
            Field("traceKey", "tk", "int"),  # the key traced (absent: the one weighed most)
            Field("traceContrast", "tc", "int"),  # the contrast key (absent: the next highest)
            Field("traceTop", "tt", "int", 12),  # pieces a side the pair matrix shows
            # the score itself, or its difference from the contrast key's
            Field("traceSide", "tv", "choice", "score", ("score", "versus")),
        ),
        widget="replay",
        token=True,
    ),
    "circuit": View(
        "Circuit",
        "why",
        "which heads work together: edges from earlier heads into later heads' inputs",
        fields=(
            # edges read off this text, the weights, or patching from a corrupted text
            Field("circuitBy", "cby", "choice", "text", ("text", "weights", "edges")),
            Field("circuitInputs", "cin", "choice", "all", ("all", "q", "k", "v")),
            Field("circuitMin", "cmin", "number", 0.2),  # edges below this share of the largest
            text("circuitCorrupted", "ccor"),  # by=edges: the corrupted text
            text("circuitTarget", "ctgt"),  # its metric's tokens ("" = the top guesses)
            text("circuitContrast", "ccon"),
        ),
        widget="replay",
    ),
    "ablation": View(
        "Ablation",
        "intervene",
        "switch heads off and see what they did",
        # the heads switched off, "layer.head, ..."; "zero" or "mean"
        fields=(text("ablate", "off"), text("ablation", "offmode", "zero")),
    ),
    "compare": View(
        "Compare",
        "intervene",
        "this head beside another head, text or model",
        # head B as "layer.head"; B's text and model, when they are others
        fields=(
            text("compare", "cmp"),
            text("compareText", "cmptext"),
            text("compareModel", "cmpmodel"),
        ),
    ),
    "lens": View(
        "Logit lens",
        "writes",
        "every layer's stream read as if it were the last",
        fields=(
            text("lensToken", "lt"),  # the token followed ("" = the model's top guess)
            # colour by that token's probability or the top guess's
            Field("lensShade", "ls", "choice", "token", ("token", "top")),
            text("lensCell", "lc"),  # the cell opened, "row.column"
        ),
        widget="writes",
    ),
    "attribution": View(
        "Direct attribution",
        "writes",
        "each head's direct push toward a token, and from where",
        fields=(
            Field("dlaPosition", "dp", "int"),  # the position explained (absent: the last)
            text("dlaTarget", "dt"),  # the target token ("" = the top guess)
            text("dlaContrast", "dc"),  # the contrast token ("" = none)
            text("dlaSource", "ds"),  # the head split by key, "layer.head"
        ),
        widget="writes",
    ),
    "patching": View(
        "Patching",
        "writes",
        "which heads carry the difference between two texts",
        fields=(
            text("patchText", "pc"),  # the corrupted text
            text("patchTarget", "pt"),  # the metric's first token ("" = the clean top guess)
            text("patchContrast", "pk"),  # its second ("" = the corrupted top guess)
            Field("patchExact", "px", "flag", False),  # run exact patching too
        ),
    ),
}


def page_views() -> list[dict]:
    """The views in tab order, for the page's script: [{name, label, group, token}]."""
    return [
        {"name": name, "label": v.label, "group": v.group, "token": v.token}
        for name, v in VIEWS.items()
    ]


def widget_views(kind: str) -> list[tuple[str, str]]:
    """The views the notebook widget offers that need `kind`, in tab order: [(name, label)]."""
    return [(name, v.label) for name, v in VIEWS.items() if v.widget == kind]


def page_fields() -> list[dict]:
    """Every URL field of the page and its views, for static/js/state.js:
    [{key, param, type, default, choices}]."""
    fields = [*PAGE_FIELDS, *(f for view in VIEWS.values() for f in view.fields)]
    keys = [f.key for f in fields]
    params = [f.param for f in fields]
    if len(set(keys)) != len(keys) or len(set(params)) != len(params):
        raise ValueError(f"two URL fields share a key or a parameter: {keys}, {params}")
    return [
        {"key": f.key, "param": f.param, "type": f.type, "default": f.default, "choices": f.choices}
        for f in fields
    ]


def views_taught_by(slug: str) -> list[tuple[str, View]]:
    """The explorer views a lab topic links back to: [(name, view)]."""
    return [(name, view) for name, view in VIEWS.items() if slug in view.labs]
