"""Every term the pages show, defined once: a one-line gloss (shown on hover and focus wherever
the term appears) and, on the glossary page, a formula or a picture.

`pattern` is the regular expression (JavaScript syntax, matched case-sensitively on whole
words) that finds the term in a page's text; `picture` names a small attention pattern the
glossary page draws (static/js/glossary.js).
"""

from __future__ import annotations

from dataclasses import dataclass

from attention_core.training import PHASE_CHANGE_SCORE


@dataclass(frozen=True)
class Term:
    label: str
    gloss: str  # one line, shown on hover and focus
    pattern: str  # how the term is written on the pages
    formula: str = ""  # plain text with Unicode maths
    picture: str = ""  # a pattern drawn on the glossary page


TERMS: dict[str, Term] = {
    "token": Term(
        "token",
        "a piece of text the model reads as one unit: a word, part of a word, or a sign",
        r"tokens?",
        picture="tokens",
    ),
    "query": Term(
        "query",
        "what a token looks for: its vector q = x·W_Q, compared with every key",
        r"quer(?:y|ies)",
        "q = x · W_Q",
    ),
    "key": Term(
        "key",
        "what a token offers to be found by: k = x·W_K; a query favours keys with a large q·k",
        r"keys?",
        "k = x · W_K",
    ),
    "value": Term(
        "value",
        "what a token passes on when attended to: v = x·W_V, mixed by the weights",
        r"values?",
        "v = x · W_V;   output = Σⱼ αⱼ vⱼ",
    ),
    "head": Term(
        "head",
        "one attention pattern of a layer, with its own W_Q, W_K and W_V",
        r"heads?",
        "headₕ = softmax(Q_h K_hᵀ / √d) V_h;   layer output = [head₁ … head_H] · W_O",
    ),
    "layer": Term(
        "layer",
        "one transformer block: attention (all its heads), then an MLP; models stack them",
        r"layers?",
        formula="h = x + Attention(norm(x));   x′ = h + MLP(norm(h))",
    ),
    "weight": Term(
        "attention weight",
        "how much a query takes from a key: softmax of the scores, each row summing to 1",
        r"weights?",
        "αᵢⱼ = softmax_j(qᵢ · kⱼ / √d)",
        picture="previous",
    ),
    "softmax": Term(
        "softmax",
        "turns scores into positive weights that sum to 1; larger scores get far more",
        r"softmax",
        "softmax(s)ⱼ = exp(sⱼ) / Σₖ exp(sₖ)",
    ),
    "scale": Term(
        "1/√d scale",
        "scores are divided by √d (d: the size of q and k) so softmax does not saturate",
        r"√d",
        "scores = q · k / √d",
    ),
    "mask": Term(
        "mask",
        "which keys a query may see: −∞ is added to the others' scores before softmax",
        r"masks?",
        "αᵢⱼ = 0 where the mask forbids j",
        picture="causal",
    ),
    "causal": Term(
        "causal",
        "a decoder's mask: each token sees itself and the tokens before it, never later ones",
        r"causal",
        picture="causal",
    ),
    "sink": Term(
        "attention sink",
        "a token (often the first) where a head parks the attention it has no other use for",
        r"sinks?",
        picture="sink",
    ),
    "previous-token": Term(
        "previous-token head",
        "a head whose every token attends to the token just before it",
        r"previous-token",
        picture="previous",
    ),
    "duplicate-token": Term(
        "duplicate-token head",
        "a head whose tokens attend to earlier copies of themselves",
        r"duplicate-token",
        picture="duplicate",
    ),
    "local-window": Term(
        "local window head",
        "a head that spreads its attention over the few tokens on either side",
        r"local window",
        picture="local",
    ),
    "self": Term(
        "self head",
        "a head whose tokens attend mostly to themselves (the main diagonal)",
        r"self head",
        picture="self",
    ),
    "separator": Term(
        "separator head",
        "a head that attends to punctuation and separator tokens such as [SEP]",
        r"separator head",
        picture="separator",
    ),
    "induction": Term(
        "induction head",
        "a head that finds an earlier copy of the current span and attends to what came next",
        r"induction",
        picture="induction",
    ),
    "entropy": Term(
        "entropy",
        "how spread a row of weights is: 0 on one key; normalised, 1 when uniform",
        r"entropy",
        "H = −Σⱼ αⱼ log αⱼ;   normalised: H / log(keys the query may see)",
    ),
    "nats": Term(
        "nats",
        "the unit of entropy and KL divergence with natural logarithms (1 nat ≈ 1.44 bits)",
        r"nats?",
        "1 nat = 1 / ln 2 bits",
    ),
    "replay": Term(
        "replay",
        "recomputing a head from the model's weights and the real pass's hidden states, to "
        "show its q, k and v; tested equal to the model's own map",
        r"replay(?:ed|s)?",
        formula="A_h = softmax((X W_Q^h)(X W_K^h)ᵀ / √d + mask),  X from the real pass",
    ),
    "delta": Term(
        "|Δ|",
        "the largest absolute difference between two sets of numbers",
        r"\|Δ\|",
        "|Δ| = maxᵢⱼ |aᵢⱼ − bᵢⱼ|",
    ),
    "tv": Term(
        "total variation (TV)",
        "how far apart two rows of weights are: 0 the same, 1 no weight in common",
        r"TV|total variation",
        "TV(p, q) = ½ Σⱼ |pⱼ − qⱼ|",
    ),
    "kl": Term(
        "KL divergence",
        "how much a distribution p differs from q, in nats: 0 only when they are equal",
        r"KL",
        "KL(p ‖ q) = Σⱼ pⱼ log(pⱼ / qⱼ)",
    ),
    "kv": Term(
        "key/value head (kv0, kv1 …)",
        "with GQA several query heads share one key/value head: kv1 is the second",
        r"kv\d+",
        "query head h reads key/value head ⌊h / (H / H_kv)⌋",
    ),
    "gqa": Term(
        "GQA, MQA",
        "grouped-query attention: query heads share fewer key/value heads (MQA: one for all)",
        r"GQA|MQA",
        formula="H query heads share H_kv key/value heads: MHA H_kv = H;  GQA 1 < H_kv < H;  MQA H_kv = 1",
    ),
    "alpha-v": Term(
        "‖α·v‖",
        "what a query really takes from a key: its weight times the length of the key's value",
        r"‖α·v‖",
        "‖αᵢⱼ vⱼ‖ (Kobayashi et al., 2020)",
    ),
    "macs": Term(
        "MACs",
        "multiply-accumulate operations: a count of the arithmetic a computation costs",
        r"MACs?",
        "QKᵀ for n tokens of size d: n² · d MACs",
    ),
    "block-maxima": Term(
        "block maxima",
        "a large map drawn small: each cell stands for a block of weights and shows its largest",
        r"block maxima",
        formula="cell(I, J) = max over i ∈ I, j ∈ J of αᵢⱼ",
    ),
    "space-marker": Term(
        "␣",
        "the token starts with a space: how a tokenizer marks the start of a word",
        r"␣",
        picture="tokens",
    ),
    "logit": Term(
        "logit",
        "the model's raw score for a possible next token, before softmax turns scores into "
        "probabilities",
        r"logits?",
        formula="p(t) = exp(z_t) / Σ_u exp(z_u)",
    ),
    "rollout": Term(
        "attention rollout",
        "attention traced through the layers: each layer's averaged heads plus the residual, "
        "multiplied up",
        r"rollout",
        "R_l = Â_l · R_(l−1),   Â = r·I + (1 − r)·mean over heads",
    ),
    "residual": Term(
        "residual stream",
        "the vector each token carries through the model; every layer adds its output to it",
        r"residual",
        formula="x_(l+1) = x_l + attention_l + MLP_l",
    ),
    "logit-lens": Term(
        "logit lens",
        "the residual stream after a layer read through the final norm and the model's head, "
        "as if that layer were the last: what the model would guess there",
        r"logit lens",
        formula="lens_l = softmax(W_U · norm(x_l))",
    ),
    "direct-effect": Term(
        "direct effect",
        "what one piece (a head, an MLP, the embeddings) adds to a logit on its own, read "
        "through the final norm with its scale frozen at its real value",
        r"direct (?:effect|logit attribution)",
        formula="effect(c) = s · (center(γ ⊙ u_target)) · c,   Σ_c effect(c) + biases = logit",
    ),
    "unembedding": Term(
        "unembedding",
        "the model's last matrix: each token's row read against the stream gives its logit",
        r"unembedding",
        formula="z_t = u_t · norm(x) + b_t",
    ),
    "patching": Term(
        "activation patching",
        "copy one piece of a clean run into a corrupted run and measure how much of the answer "
        "comes back",
        r"(?:activation |exact |attribution )?patching",
        formula="recovered = (m_patched − m_corrupted) / (m_clean − m_corrupted)",
    ),
    "attribution-patching": Term(
        "attribution patching",
        "patching estimated from one gradient: gradient × (clean − corrupted), every piece at "
        "once instead of a rerun per piece",
        r"gradient estimate",
        formula="recovered ≈ ∂m/∂a · (a_clean − a_corrupted) / (m_clean − m_corrupted)",
    ),
    "score-trace": Term(
        "score trace",
        "one attention score taken apart: with the norms' scales frozen, q and k are sums of "
        "the stream's pieces, and the score a sum over pairs of them",
        r"score traces?",
        formula="s_ij = scale · (Σ_a q_i(a)) · (Σ_b k_j(b)) = Σ_a Σ_b scale · q_i(a) · k_j(b)",
    ),
    "k-composition": Term(
        "K-composition",
        "a later head's keys read an earlier head's output: an induction head's keys come "
        "from a previous-token head",
        r"K-composition",
        formula="k_j = W_K · norm(… + Σ_h o_h(j) + …);   its part from head h: W_K · norm(o_h(j))",
    ),
    "phase-change": Term(
        "phase change",
        "the few training steps in which an induction head forms: the loss on repeated text "
        "falls off a cliff as a later head starts to copy (Olsson et al. 2022)",
        r"phase change",
        formula="first step t with max over heads of layers ≥ 1 of induction score(t) > "
        f"{PHASE_CHANGE_SCORE}",
    ),
}
