"""The explorer's views, grouped by the question they answer: the one list the tabs, the
page's state and the lab's links back read.

A newcomer meets the groups first (two rows of choices at most, whatever the width): the
everyday views lead each group, and the rest are one click away.
"""

from __future__ import annotations

from dataclasses import dataclass


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


GROUPS: dict[str, Group] = {
    "look": Group("Look at a head", "Where does one head send each token's attention?"),
    "find": Group("Find heads", "Which heads do what, across every layer?"),
    "token": Group("Follow a token", "What does one token read, and who reads it?"),
    "explain": Group("Explain the numbers", "How does a head compute its weights?"),
    "intervene": Group("Intervene", "What changes when a head or the text changes?"),
    "writes": Group("What heads write", "Which heads push the model toward its answer?"),
}

VIEWS: dict[str, View] = {
    "heatmap": View(
        "Heatmap", "look", "queries down, keys across, each weight a cell", ("what-a-head-is",)
    ),
    "lines": View("Token to token", "look", "lines from each token to those it attends to"),
    "qkspace": View("Q-K space", "look", "queries and keys in one plane: near means attended"),
    "grid": View("All heads", "find", "every layer and head as small maps", ("heads",)),
    "heads": View("Head roles", "find", "each head's statistics and the roles they imply"),
    "search": View("Search", "find", "heads by a weight, a role, a statistic or a span"),
    "similarity": View("Similar heads", "find", "which heads draw the same pattern"),
    "follow": View("Layer by layer", "token", "one token as a query and as a key, every layer"),
    "aggregate": View(
        "Average & rollout", "token", "a layer's heads averaged; rollout through layers"
    ),
    # Not in the first group: no model Atlas ships is an encoder-decoder (docs/models.md).
    "decoder": View(
        "Decoder & cross", "token", "an encoder-decoder's decoder, and its attention to the input"
    ),
    "qk": View(
        "Query · Key", "explain", "a token's query against every key", ("step-by-step", "scoring")
    ),
    "steps": View("Step by step", "explain", "QKᵀ, scale, mask, softmax, × V", ("step-by-step",)),
    "mask": View(
        "Mask", "explain", "the mask the model used, before and after softmax", ("masks", "padding")
    ),
    "whatif": View("Without √d", "explain", "the head without its 1/√d scale", ("scaling",)),
    "value": View("Value-weighted", "explain", "what each key really passes on: ‖α·v‖"),
    "ablation": View("Ablation", "intervene", "switch heads off and see what they did"),
    "compare": View("Compare", "intervene", "this head beside another head, text or model"),
    "lens": View("Logit lens", "writes", "every layer's stream read as if it were the last"),
    "attribution": View(
        "Direct attribution", "writes", "each head's direct push toward a token, and from where"
    ),
    "patching": View("Patching", "writes", "which heads carry the difference between two texts"),
}


def page_views() -> list[dict]:
    """The views in tab order, for the page's script: [{name, label, group}]."""
    return [{"name": name, "label": v.label, "group": v.group} for name, v in VIEWS.items()]


def views_taught_by(slug: str) -> list[tuple[str, View]]:
    """The explorer views a lab topic links back to: [(name, view)]."""
    return [(name, view) for name, view in VIEWS.items() if slug in view.labs]
