"""The lab's topics as a course, in teaching order: the one list the course page, the topic bar,
each page's Previous / Next and the routes read."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Topic:
    title: str
    summary: str
    part: str  # the part of the course it belongs to (PARTS)


PARTS = {
    "first": "First steps: what attention computes",
    "model": "What a real model adds: masks, padding, positions",
    "variants": "Variants: more heads, other texts, other scores, fewer pairs",
    "efficient": "Attention at scale: tiles, linear attention, cost",
    "learning": "How attention is learned: a circuit forming in training",
}

LAB_TOPICS: dict[str, Topic] = {
    "what-a-head-is": Topic(
        "What a head is",
        "One real layer: each head's own W_Q, W_K, W_V, their outputs joined and mixed by W_O.",
        "first",
    ),
    "forward-pass": Topic(
        "One forward pass",
        "Tokens → embeddings → blocks → next-token probabilities, on SmolLM2 live.",
        "first",
    ),
    "step-by-step": Topic(
        "Step by step", "QKᵀ → scale → mask → softmax → × V on numbers you type.", "first"
    ),
    "scaling": Topic(
        "Why √d", "Scaled against unscaled softmax: variance, entropy, gradients.", "first"
    ),
    "masks": Topic(
        "Masks", "Causal, windows, global, random, BigBird and blocks on a sentence.", "model"
    ),
    "padding": Topic("Padding", "A padded batch: why pad keys get zero weight.", "model"),
    "positions": Topic(
        "Positions", "Sinusoids and their shift; RoPE and a head without it.", "model"
    ),
    "heads": Topic("Heads, GQA, MQA", "Pool a real layer's K/V heads; KV-cache bytes.", "variants"),
    "cross": Topic(
        "Cross-attention", "Queries from one sentence, keys and values from another.", "variants"
    ),
    "scoring": Topic(
        "Score functions", "Additive, general and scaled dot-product side by side.", "variants"
    ),
    "sparse": Topic(
        "Sparse weights", "Seven sparse patterns on a real head: what they drop.", "variants"
    ),
    "tiling": Topic("FlashAttention", "The online softmax, one tile at a time.", "efficient"),
    "linear": Topic("Linear attention", "φ(Q)(φ(K)ᵀV): no n × n matrix.", "efficient"),
    "cost": Topic("Cost", "Pairs, MACs and memory up to a million tokens.", "efficient"),
    "induction": Topic(
        "Watch an induction head form",
        "Train a small model live: the loss cliff and the induction head arrive at one step.",
        "learning",
    ),
}


def neighbours(slug: str) -> tuple[str | None, str | None]:
    """The topics before and after `slug` in the course (None at either end)."""
    order = list(LAB_TOPICS)
    i = order.index(slug)
    return (order[i - 1] if i else None, order[i + 1] if i + 1 < len(order) else None)
