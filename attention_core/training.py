"""Train a small attention-only transformer and watch its heads form, snapshot by snapshot.

The model is built from this package's own attention (`multi_head_attention`, `causal_mask`),
so the stack the lab teaches is the one that learns:

    token embedding (+ learned position embedding, optional)
    -> L x [ x + Attn(LayerNorm(x)) ]     pre-LayerNorm causal multi-head attention, no MLP
    -> final LayerNorm -> unembedding (untied, no bias)

Every LayerNorm has eps 1e-5 and every projection a bias, exactly GPT-2's block with its MLP
switched off, so a trained model saves as a GPT-2 checkpoint (atlas_engine.inference.trained).

Two tasks, each a sequence of 2 * half random tokens (make_batch):

    induction   random tokens written twice: x1..xn x1..xn (in training, n and the copies'
                place vary among random filler). From the second copy's second token on, the
                next token is the one that followed the current token's earlier copy. One layer
                cannot do this (Olsson et al. 2022); two layers form an induction head: a layer-0
                previous-token head writes "my previous token was A" and a layer-1 head attends
                to the key whose previous token matches the query (K-composition). The loss
                trains on the targets a copy can predict (trained_targets).
    reverse     the half, then the half reversed: x1..xn xn..x1. Query i of the second half
                attends to key 2n - 2 - i, an anti-diagonal fixed by position alone: one head of
                one layer does it, with no composition, so it needs no phase change. Measured
                with the default knobs: the second half's loss under 0.05 by step 200 (3 s
                here), the best head's reverse score 0.95; without positions it is not learned.
                A learner compares a circuit of content (induction) with one of position.

Attention patterns are (batch, heads, q_len, k_len) as everywhere in attention_core; per-head
scores are (layers, heads). Determinism: `train` draws data, initial weights and the probe batch
from torch generators seeded by `config.seed` and never touches the global RNG, so one seed
gives the same curve twice on the same machine and thread count; across machines (another CPU's
SIMD width, another BLAS) float sums round differently and the curves drift apart after the
first steps. Run it on a thread with one intra-op thread (the server's quick lane): on the
shared 2-core VM two contended threads made a step 10-25x slower.

Streaming: `train(config, every, on_snapshot)` calls back on its own thread between steps; a
Snapshot is a few floats plus (layers, heads) scores and a (layers, heads, T, T) float32 map
(Snapshot.nbytes: 18 KiB for the default config), and `training_cost` sizes a run before it
is admitted.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace

import torch
from torch import Tensor, nn
from torch.nn import functional as F

from attention_core.heads import merge_heads
from attention_core.masks import causal_mask
from attention_core.multihead import AttentionProjections, multi_head_attention
from attention_core.positional import sinusoidal_encoding

TASKS = ("induction", "reverse")
LAYER_NORM_EPS = 1e-5  # GPT-2's layer_norm_epsilon, and nn.LayerNorm's default
MAX_LAYERS = 3
MAX_HEADS = 8
MAX_D_MODEL = 128
MAX_VOCAB = 100  # the tokenizer names 100 tokens (atlas_engine.inference.trained.token_names)
MAX_HALF = 32  # sequences of at most 64 tokens
MAX_STEPS = 5000
MAX_BATCH = 128
PROBE_BATCH = 64  # sequences the per-head scores average over
PHASE_CHANGE_SCORE = 0.4  # a layer >= 1 head's induction score above this: the phase change


@dataclass(frozen=True)
class TrainConfig:
    """One training run. Every field is bounded (`validate`, called on construction)."""

    task: str = "induction"
    layers: int = 2
    heads: int = 4
    d_model: int = 64
    vocab: int = 32
    half: int = 12  # tokens in each half (copy); the sequence is 2 * half
    positions: bool = True  # a learned position embedding; off: the model sees only tokens
    lr: float = 3e-3  # Adam's learning rate
    steps: int = 1500
    batch: int = 32
    seed: int = 0

    def __post_init__(self) -> None:
        self.validate()

    @property
    def seq_len(self) -> int:
        return 2 * self.half

    @property
    def head_dim(self) -> int:
        return self.d_model // self.heads

    def validate(self) -> None:
        """Raise ValueError naming the field, its value and what is allowed."""
        if self.task not in TASKS:
            raise ValueError(f"task must be one of {TASKS}; got {self.task!r}")
        bounds = {
            "layers": (self.layers, 1, MAX_LAYERS),
            "heads": (self.heads, 1, MAX_HEADS),
            "d_model": (self.d_model, 8, MAX_D_MODEL),
            "vocab": (self.vocab, 4, MAX_VOCAB),
            "half": (self.half, 2, MAX_HALF),
            "steps": (self.steps, 1, MAX_STEPS),
            "batch": (self.batch, 1, MAX_BATCH),
            "seed": (self.seed, 0, 2**31 - 1),
        }
        for name, (value, low, high) in bounds.items():
            if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
                raise ValueError(f"{name} must be an integer in [{low}, {high}]; got {value!r}")
        if self.d_model % self.heads:
            raise ValueError(
                f"d_model={self.d_model} must be divisible by heads={self.heads} "
                f"(try d_model={self.heads * max(1, self.d_model // self.heads)})"
            )
        if not isinstance(self.positions, bool):
            raise ValueError(f"positions must be true or false; got {self.positions!r}")
        if not isinstance(self.lr, (int, float)) or not 0 < self.lr <= 0.1:
            raise ValueError(f"lr must be in (0, 0.1]; got {self.lr!r}")


# ---------------------------------------------------------------------------------------------
# Data


def make_batch(
    config: TrainConfig, batch: int, generator: torch.Generator, *, repeat: int | None = None
) -> Tensor:
    """`batch` sequences of the task, drawn from `generator`. (batch, 2 * half) int64.

    Tokens are uniform over the vocabulary, drawn with replacement.
    induction: n random tokens written twice, at a random place among random filler. n is
    `repeat` when given (the probe uses n = half: the whole sequence, no filler), otherwise
    drawn per sequence from [2, half], and the first copy starts anywhere it fits, so neither
    the distance between the copies nor their place is fixed: no head can find the earlier copy
    by position alone (with a fixed layout one layer-0 head copies by position, measured), it
    must find it by content, which takes an induction head.
    reverse: the first half, then the first half reversed (a fixed layout: a circuit of
    positions)."""
    t_len = config.seq_len
    tokens = torch.randint(0, config.vocab, (batch, t_len), generator=generator)  # (B, T)
    if config.task == "reverse":
        first = tokens[:, : config.half]  # (B, n)
        return torch.cat([first, first.flip(-1)], dim=-1)  # (B, 2n)
    if repeat is None:
        n = torch.randint(2, config.half + 1, (batch, 1), generator=generator)  # (B, 1)
    else:
        n = torch.full((batch, 1), repeat)
    free = t_len - 2 * n + 1  # (B, 1) places the first copy can start
    start = (torch.rand(batch, 1, generator=generator) * free).long()  # (B, 1)
    t = torch.arange(t_len).unsqueeze(0)  # (1, T)
    second = (t >= start + n) & (t < start + 2 * n)  # (B, T)
    source = torch.where(second, t - n, t)  # (B, T): the second copy reads n back
    return tokens.gather(1, source)  # (B, T)


def trained_targets(config: TrainConfig, tokens: Tensor) -> Tensor:
    """The next-token targets the training loss counts. (batch, 2n - 1) bool over tokens[:, 1:].

    reverse: every target. induction: the targets whose current token occurred earlier in the
    sequence, the only ones a copy can predict; the filler and first-copy targets are noise
    (uniform random tokens) whose gradients would only slow the phase change."""
    if config.task == "reverse":
        return torch.ones(tokens.shape[0], config.seq_len - 1, dtype=torch.bool)
    current = tokens[:, :-1]  # (B, T-1): the token each target is predicted at
    same = current.unsqueeze(2) == current.unsqueeze(1)  # (B, T-1, T-1): [i, j] same token
    earlier = torch.ones(config.seq_len - 1, config.seq_len - 1, dtype=torch.bool).tril(-1)
    return (same & earlier).any(dim=-1)  # (B, T-1)


def target_halves(config: TrainConfig) -> tuple[Tensor, Tensor]:
    """Which next-token targets of a probe sequence (`probe_batches`: induction with n = half,
    no filler) count as its first and its second half. Two (2n - 1,) bools over the targets
    tokens[:, 1:] (target t is predicted at position t - 1).

    first: targets 1..n-1, random tokens no model can predict beyond ln(vocab).
    second (induction): targets n+1..2n-1, each the token after the current token's earlier
    copy; target n (the second copy's first token) follows nothing and is left out of both.
    second (reverse): targets n..2n-1; target n equals the current token, the last of the first
    half, and a model that knows the position can copy it."""
    n = config.half
    t = torch.arange(1, 2 * n)  # target positions
    first = t < n
    second = t > n if config.task == "induction" else t >= n
    return first, second


# ---------------------------------------------------------------------------------------------
# The model


class AttentionLayer(nn.Module):
    """x + Attn(LayerNorm(x)): one pre-LayerNorm causal multi-head attention block, no MLP."""

    def __init__(self, d_model: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.ln = nn.LayerNorm(d_model, eps=LAYER_NORM_EPS)
        self.w_q = nn.Parameter(torch.empty(d_model, d_model))  # nn.Linear layout: (out, in)
        self.w_k = nn.Parameter(torch.empty(d_model, d_model))
        self.w_v = nn.Parameter(torch.empty(d_model, d_model))
        self.w_o = nn.Parameter(torch.empty(d_model, d_model))
        self.b_q = nn.Parameter(torch.zeros(d_model))
        self.b_k = nn.Parameter(torch.zeros(d_model))
        self.b_v = nn.Parameter(torch.zeros(d_model))
        self.b_o = nn.Parameter(torch.zeros(d_model))

    def projections(self) -> AttentionProjections:
        return AttentionProjections(
            self.w_q, self.w_k, self.w_v, self.w_o, self.b_q, self.b_k, self.b_v, self.b_o
        )

    def forward(self, x: Tensor, mask: Tensor, ablate: Sequence[int] = ()) -> tuple[Tensor, Tensor]:
        """x: (batch, seq, d_model) -> (x + attention, weights (batch, heads, seq, seq)).

        ablate: heads whose output (their weighted values, before W_o) is set to zero."""
        result = multi_head_attention(self.ln(x), None, self.projections(), self.heads, mask=mask)
        out = result.output
        if ablate:
            keep = torch.ones(self.heads, 1, 1, dtype=x.dtype, device=x.device)
            keep[list(ablate)] = 0
            z = result.trace.output * keep  # (B, H, T, hd), the ablated heads zero
            out = merge_heads(z) @ self.w_o.T + self.b_o  # (B, T, d_model)
        return x + out, result.weights


@dataclass(frozen=True)
class Forward:
    """One pass: logits (batch, seq, vocab) and each layer's weights, stacked
    (layers, batch, heads, seq, seq)."""

    logits: Tensor
    weights: Tensor


class AttentionOnly(nn.Module):
    """The attention-only transformer of the module docstring."""

    def __init__(self, config: TrainConfig) -> None:
        super().__init__()
        self.config = config
        d = config.d_model
        self.embed = nn.Parameter(torch.empty(config.vocab, d))  # (V, d)
        self.pos = nn.Parameter(torch.zeros(config.seq_len, d), requires_grad=config.positions)
        self.blocks = nn.ModuleList(AttentionLayer(d, config.heads) for _ in range(config.layers))
        self.ln_f = nn.LayerNorm(d, eps=LAYER_NORM_EPS)
        self.unembed = nn.Parameter(torch.empty(config.vocab, d))  # (V, d), logits = x W^T
        self.reset_parameters(torch.Generator().manual_seed(config.seed))

    @torch.no_grad()
    def reset_parameters(self, generator: torch.Generator) -> None:
        """Weights drawn from `generator` in a fixed order: token embeddings normal with std 1,
        position embeddings starting as the original sinusoids (attention_core.positional:
        a fixed offset such as "the previous token" is a rotation of them, so a previous-token
        head is quick to learn) and learned from there, zero when positions are off;
        projections GPT-2's normal with std 0.02 (W_o 0.02 / sqrt(2 L))."""
        std = 0.02
        nn.init.normal_(self.embed, std=1.0, generator=generator)
        if self.config.positions:  # sinusoids scaled to rms 1, like the token embeddings
            self.pos.copy_(sinusoidal_encoding(self.config.seq_len, self.config.d_model) * 2**0.5)
        for block in self.blocks:
            for w in (block.w_q, block.w_k, block.w_v):
                nn.init.normal_(w, std=std, generator=generator)
            w_o_std = std / math.sqrt(2 * self.config.layers)
            nn.init.normal_(block.w_o, std=w_o_std, generator=generator)
        nn.init.normal_(self.unembed, std=std, generator=generator)

    def forward(self, tokens: Tensor, ablate: Sequence[tuple[int, int]] = ()) -> Forward:
        """tokens: (batch, seq) int64, seq <= 2 * half. ablate: (layer, head) pairs to zero."""
        if tokens.dim() != 2 or tokens.shape[1] > self.config.seq_len:
            raise ValueError(
                f"tokens must be (batch, seq) with seq <= {self.config.seq_len}; "
                f"got shape {tuple(tokens.shape)}"
            )
        seq = tokens.shape[1]
        x = self.embed[tokens] + self.pos[:seq]  # (B, T, d)
        mask = causal_mask(seq, device=tokens.device)  # (T, T), True = may attend
        weights = []
        for i, block in enumerate(self.blocks):
            x, w = block(x, mask, [h for layer, h in ablate if layer == i])
            weights.append(w)
        logits = self.ln_f(x) @ self.unembed.T  # (B, T, V)
        return Forward(logits=logits, weights=torch.stack(weights))  # (L, B, H, T, T)


# ---------------------------------------------------------------------------------------------
# Head scores (Olsson et al. 2022; TransformerLens's induction demo)


def previous_token_scores(weights: Tensor) -> Tensor:
    """Each head's mean attention from query i to key i - 1, over queries i >= 1 and the batch:
    TransformerLens's `pattern.diagonal(-1).mean()` (the previous-token head detector).

    weights: (..., batch, heads, T, T) -> (..., heads)."""
    return weights.diagonal(offset=-1, dim1=-2, dim2=-1).mean(dim=(-3, -1))


def induction_scores(weights: Tensor, half: int) -> Tensor:
    """Olsson et al.'s prefix-matching score on a sequence repeated twice: each head's mean
    attention from a second-copy query i (n <= i < 2n) to key i - n + 1, the token that followed
    the earlier copy of the query's token. TransformerLens computes it as the diagonal at offset
    1 - n of the pattern on repeated random tokens; here only second-copy queries are averaged.

    weights: (..., batch, heads, 2n, 2n) -> (..., heads)."""
    stripe = weights.diagonal(offset=1 - half, dim1=-2, dim2=-1)  # query i = n - 1 + k, key k
    return stripe[..., 1:].mean(dim=(-3, -1))  # queries n..2n-1


def reverse_scores(weights: Tensor, half: int) -> Tensor:
    """Each head's mean attention from a second-half query i (n - 1 <= i < 2n - 1) to key
    2n - 2 - i, the token the next output copies when reversing. (..., heads)."""
    n = half
    flipped = weights[..., n - 1 : 2 * n - 1, :].flip(-1)  # key j -> column T - 1 - j
    # key 2n - 2 - i sits at flipped column (2n - 1) - (2n - 2 - i) = i + 1; row r = i - n + 1
    diag = flipped.diagonal(offset=n, dim1=-2, dim2=-1)  # row r, column r + n = i + 1
    return diag.mean(dim=(-3, -1))


# ---------------------------------------------------------------------------------------------
# Training


@dataclass(frozen=True)
class Snapshot:
    """What the page shows at one step. Losses are in nats, on the fixed probe batch of the task
    (PROBE_BATCH sequences), the model in eval mode; scores are (layers, heads) float32.

    previous_token, induction: on a fixed batch of repeated random tokens (whatever the task,
    so a reverse-trained model shows it has no induction head). task_score: the task's own
    pattern on its probe batch (induction: the same as induction; reverse: reverse_scores).
    maps: (layers, heads, T, T) float32, each head's attention on the first probe sequence
    (`probe_tokens`)."""

    step: int
    elapsed: float  # seconds since training started, snapshots included
    loss: float  # every target
    loss_first: float  # target_halves' first
    loss_second: float  # target_halves' second
    previous_token: Tensor
    induction: Tensor
    task_score: Tensor
    maps: Tensor

    @property
    def nbytes(self) -> int:
        """Bytes of the tensors: what keeping this snapshot for the scrubber holds."""
        tensors = (self.previous_token, self.induction, self.task_score, self.maps)
        return sum(t.numel() * t.element_size() for t in tensors)

    @property
    def phase_changed(self) -> bool:
        """An induction head has formed: a head of layer >= 1 scores above PHASE_CHANGE_SCORE.
        Never true for one layer (a layer-0 head has no previous-token head to compose with)."""
        later = self.induction[1:]
        return bool(later.numel()) and float(later.max()) > PHASE_CHANGE_SCORE


@dataclass
class TrainRun:
    """What `train` returns: the model (eval mode), the last snapshot, and why it ended."""

    model: AttentionOnly
    last: Snapshot
    stopped: bool  # on_snapshot returned False before config.steps
    steps_done: int
    probe_tokens: Tensor = field(repr=False)  # (PROBE_BATCH, 2n) of the task; maps show row 0


def probe_batches(config: TrainConfig) -> tuple[Tensor, Tensor]:
    """(task probe, repeated probe): two fixed (PROBE_BATCH, 2n) batches, the whole half
    written twice (or reversed), drawn from a generator of their own, not the training stream.
    For induction the two are one batch."""
    g = torch.Generator().manual_seed(config.seed + 1_000_003)
    task = make_batch(config, PROBE_BATCH, g, repeat=config.half)
    if config.task == "induction":
        return task, task
    repeated = make_batch(replace(config, task="induction"), PROBE_BATCH, g, repeat=config.half)
    return task, repeated


@torch.no_grad()
def evaluate(
    model: AttentionOnly,
    task_probe: Tensor,
    repeated_probe: Tensor,
    *,
    step: int = 0,
    elapsed: float = 0.0,
    ablate: Sequence[tuple[int, int]] = (),
) -> Snapshot:
    """A Snapshot of `model` on the two probe batches (see probe_batches)."""
    config = model.config
    was_training = model.training
    model.eval()
    out = model(task_probe, ablate)
    per_target = F.cross_entropy(
        out.logits[:, :-1].transpose(1, 2), task_probe[:, 1:], reduction="none"
    )  # (B, 2n - 1)
    first, second = target_halves(config)
    if config.task == "induction":
        repeated_weights = out.weights
        task_score = induction_scores(out.weights, config.half)
    else:
        repeated_weights = model(repeated_probe, ablate).weights
        task_score = reverse_scores(out.weights, config.half)
    model.train(was_training)
    return Snapshot(
        step=step,
        elapsed=elapsed,
        loss=float(per_target.mean()),
        loss_first=float(per_target[:, first].mean()),
        loss_second=float(per_target[:, second].mean()),
        previous_token=previous_token_scores(repeated_weights),
        induction=induction_scores(repeated_weights, config.half),
        task_score=task_score,
        maps=out.weights[:, 0].clone(),  # (L, H, T, T)
    )


def train(
    config: TrainConfig,
    every: int,
    on_snapshot: Callable[[Snapshot], bool | None],
) -> TrainRun:
    """Train `config`, calling on_snapshot at step 0, every `every` steps and at the last step.

    on_snapshot returning False stops training there (the page's Stop, or a closed page); None
    or True goes on. It runs on the caller's thread, between steps: keep it quick (queue the
    snapshot for a stream). Adam, cross-entropy on trained_targets, data and weights
    from torch generators seeded by config.seed (see the module docstring on determinism).
    Runs on the CPU with torch's current thread count."""
    if isinstance(every, bool) or not isinstance(every, int) or every < 1:
        raise ValueError(f"every must be a positive integer; got {every!r}")
    started = time.perf_counter()
    model = AttentionOnly(config)
    task_probe, repeated_probe = probe_batches(config)
    data = torch.Generator().manual_seed(config.seed + 1)
    params = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.Adam(params, lr=config.lr, foreach=False)
    step = 0
    snapshot = evaluate(model, task_probe, repeated_probe)
    stopped = on_snapshot(snapshot) is False
    while not stopped and step < config.steps:
        tokens = make_batch(config, config.batch, data)  # (B, 2n)
        logits = model(tokens).logits  # (B, 2n, V)
        per_target = F.cross_entropy(
            logits[:, :-1].transpose(1, 2), tokens[:, 1:], reduction="none"
        )  # (B, 2n - 1)
        loss = per_target[trained_targets(config, tokens)].mean()
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        step += 1
        if step % every == 0 or step == config.steps:
            elapsed = time.perf_counter() - started
            snapshot = evaluate(model, task_probe, repeated_probe, step=step, elapsed=elapsed)
            stopped = on_snapshot(snapshot) is False and step < config.steps
    model.eval()
    return TrainRun(model, snapshot, stopped, step, task_probe)


# ---------------------------------------------------------------------------------------------
# Cost, before a run


# Measured on the project machine (2 cores, 2026-11-29, bench/training_cost.py): a step's fixed
# cost (Python, autograd and Adam over every parameter tensor) per layer and its arithmetic rate,
# on one intra-op thread: the default config measured 10.9 ms a step, one layer 6.1 ms.
SECONDS_PER_STEP = 0.001
SECONDS_PER_LAYER_STEP = 0.003
FLOPS_PER_SECOND = 5e10


@dataclass(frozen=True)
class TrainingCost:
    """A run's size before it runs: the bytes it holds at its peak and seconds on this machine."""

    parameters: int
    bytes: int  # weights, gradients, Adam's two moments, one step's activations, the snapshots
    seconds: float  # steps and snapshots, from this machine's measured rates
    snapshot_bytes: int  # one Snapshot's tensors


def training_cost(config: TrainConfig, every: int) -> TrainingCost:
    """Estimate `train(config, every, ...)`'s peak memory and time without building anything."""
    d, n_l, heads, vocab, t = (
        config.d_model,
        config.layers,
        config.heads,
        config.vocab,
        config.seq_len,
    )
    parameters = 2 * vocab * d + t * d + n_l * (4 * d * d + 6 * d) + 2 * d
    # activations kept for backward, float32: per layer the trace's five (B, H, T, T) stages and
    # about ten (B, T, d) tensors; the logits and their softmax
    b = config.batch
    activations = 4 * (n_l * (5 * b * heads * t * t + 10 * b * t * d) + 3 * b * t * vocab)
    snapshot_bytes = 4 * (n_l * heads * (t * t + 3))
    snapshots = config.steps // every + 2
    probe = 4 * (n_l * 5 * PROBE_BATCH * heads * t * t + 3 * PROBE_BATCH * t * vocab)
    nbytes = 16 * parameters + activations + probe + snapshots * snapshot_bytes
    # multiply-adds of one forward pass: projections, scores and mixing, unembedding
    forward = b * t * (n_l * (4 * 2 * d * d + 2 * 2 * t * d) + 2 * d * vocab)
    per_step = SECONDS_PER_STEP + n_l * SECONDS_PER_LAYER_STEP + 3 * forward / FLOPS_PER_SECOND
    per_snapshot = 2 * (PROBE_BATCH / b) * (forward / FLOPS_PER_SECOND + n_l * 0.0004)
    seconds = config.steps * per_step + snapshots * per_snapshot
    return TrainingCost(parameters, nbytes, seconds, snapshot_bytes)
