"""The lab's topics, in teaching order: the one list the index, the topic bar and the routes read."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Topic:
    title: str
    summary: str


LAB_TOPICS: dict[str, Topic] = {
    "step-by-step": Topic(
        "Step by step", "QKᵀ → scale → mask → softmax → × V on numbers you type."
    ),
    "scaling": Topic("Why √d", "Scaled against unscaled softmax: variance, entropy, gradients."),
    "masks": Topic("Masks", "Causal, windows, global, random, BigBird and blocks on a sentence."),
    "heads": Topic("Heads, GQA, MQA", "Pool a real layer's K/V heads; KV-cache bytes."),
    "cross": Topic("Cross-attention", "Queries from one sentence, keys and values from another."),
    "scoring": Topic("Score functions", "Additive, general and scaled dot-product side by side."),
    "tiling": Topic("FlashAttention", "The online softmax, one tile at a time."),
    "linear": Topic("Linear attention", "φ(Q)(φ(K)ᵀV): no n × n matrix."),
    "sparse": Topic("Sparse weights", "Seven sparse patterns on a real head: what they drop."),
    "positions": Topic("Positions", "Sinusoids and their shift; RoPE and a head without it."),
    "padding": Topic("Padding", "A padded batch: why pad keys get zero weight."),
    "cost": Topic("Cost", "Pairs, MACs and memory up to a million tokens."),
}
