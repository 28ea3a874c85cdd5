"""Patching from a second text: how much of a metric a component carries from a clean run into
a corrupted one.

The metric is a logit difference at one position, logit(target) - logit(contrast), taken on
the model's output (before any final softcap). A component's recovery is

    (metric of the corrupted run with the component copied from the clean run - corrupted)
    / (clean - corrupted)

so 1 means the component alone carries the whole difference and 0 nothing. Components are
each head's output (all positions, where it enters the output projection) and the residual
stream after each layer at each position.

- Exact patching reruns the corrupted text once per component: a layer's heads (or a layer's
  positions) are patched together in one batch, one batch element per component. Before each
  batch it calls its `between` hook (atlas_engine.compute.between_steps: where a long job stops
  and lets short jobs in), with the model's lock and hooks free.
- Attribution patching is its first-order approximation (Nanda's): one forward and one backward
  pass of the corrupted text give the metric's gradient at every component, and the estimate is
  gradient · (clean - corrupted), over the same denominator.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor

from atlas_engine.inference.residual import Replay, Stream, layout_of, run_stream
from atlas_engine.models.loader import LoadedModel

Between = Callable[[], None]
"""Called before each batched rerun, with nothing held: it may run other jobs on the model
(compute.run_beside), and stops the run by raising (the client gone, the server stopping)."""
Step = Callable[[int, int], None]


@dataclass(frozen=True)
class Metric:
    position: int
    target: int
    contrast: int

    def of(self, loaded: LoadedModel, stream: Stream) -> Tensor:
        """(batch,) the metric of each sequence of a pass."""
        unembed = layout_of(loaded).unembed
        logits = unembed(stream.last_hidden[:, self.position])  # (batch, vocab)
        return logits[:, self.target] - logits[:, self.contrast]


@dataclass(frozen=True)
class Patched:
    """Recovery grids, float64 on the host (None where not computed)."""

    clean: float  # the metric on the clean text
    corrupted: float  # and on the corrupted one
    heads: Tensor | None  # (layers, heads)
    stream: Tensor | None  # (layers, T)

    @staticmethod
    def recovery(values: Tensor, clean: float, corrupted: float) -> Tensor:
        return (values.double() - corrupted) / (clean - corrupted)


def attribution_patching(
    loaded: LoadedModel,
    run: Stream,
    clean: Stream,
    metric: Metric,
    clean_metric: float,
    corrupted_metric: float,
) -> Patched:
    """The backward pass through `run`, the corrupted text's pass taken apart with autograd
    (run_stream(..., grad=True)): see the module docstring."""
    n = len(run.heads)
    with torch.enable_grad():
        value = metric.of(loaded, run).sum()
        grads = torch.autograd.grad(value, [*run.heads, *run.outputs])
    span = clean_metric - corrupted_metric
    with torch.no_grad():
        heads = torch.stack([
            (grads[i][0] * (clean.heads[i][0] - run.heads[i][0])).double().sum(dim=(0, 2))
            for i in range(n)
        ])  # (layers, heads)  # fmt: skip
        stream = torch.stack([
            (grads[n + i][0] * (clean.outputs[i][0] - run.outputs[i][0])).double().sum(dim=-1)
            for i in range(n)
        ])  # (layers, T)  # fmt: skip
    return Patched(clean_metric, corrupted_metric, (heads / span).cpu(), (stream / span).cpu())


BATCH_TOKENS = 1024
"""The most tokens one batched rerun holds (its sequences times their tokens): a layer's
components are rerun a batch of at most this many at a time, the step hook between two. A
64-token `stream` layer was one batch of 64 sequences, a 12-20 s step of SmolLM2 on two
cores that a sentence sent meanwhile waited for; batches of 16 take 1.2-2.4 s, and the 64
no longer (4.9-9.8 s against 9.2-20.4 s measured here, the cores shared)."""


def batch_size(components: int, seq: int) -> int:
    """How many of a layer's `components` one rerun of a `seq`-token text patches."""
    return max(1, min(components, BATCH_TOKENS // seq))


def _batch(inputs: dict[str, Tensor], size: int) -> dict[str, Tensor]:
    return {name: value.expand(size, *value.shape[1:]) for name, value in inputs.items()}


def _per_layer(
    loaded, corrupted, metric, between, step, components: int, patches, first: int
) -> Tensor:
    """(layers, components): the metric of the corrupted text rerun with patches(layer, lo, hi)
    (run_stream's patch_heads or patch_stream) changing that layer's components lo..hi-1, one
    to a batch element, batch_size of them a rerun. The blocks a rerun leaves alone hand on the
    corrupted run's outputs instead of running (half the work: `first` is 0 where the patch
    changes its layer's block, 1 where it changes only what the block hands on). between()
    comes before each rerun, step(layer, layers) as a layer starts."""
    returned: list = []
    run_stream(loaded, corrupted, keep=False, record=returned)
    size = batch_size(components, corrupted["input_ids"].shape[1])
    rows = []
    for layer in range(len(returned)):
        replay = Replay(layer + first, returned)
        values = []
        for lo in range(0, components, size):
            hi = min(components, lo + size)
            between()
            if lo == 0:
                step(layer, len(returned))
            run = run_stream(
                loaded, _batch(corrupted, hi - lo), keep=False, replay=replay,
                **patches(layer, lo, hi),
            )  # fmt: skip
            values.append(metric.of(loaded, run).double().cpu())
        rows.append(torch.cat(values))
    return torch.stack(rows)


def exact_heads(
    loaded: LoadedModel,
    corrupted: dict[str, Tensor],
    clean: Stream,
    metric: Metric,
    between: Between,
    step: Step,
) -> Tensor:
    """(layers, heads): the metric with each head's output copied from the clean run, a layer's
    heads a batch at a time (element i patches head lo + i)."""
    heads = clean.heads[0].shape[2]

    def patches(layer: int, lo: int, hi: int) -> dict:
        source = clean.heads[layer][0]  # (T, heads, head_dim)

        def patch(at: int, out: Tensor) -> Tensor:  # out: (batch, T, heads, head_dim)
            if at != layer:
                return out
            out = out.clone()
            for i, h in enumerate(range(lo, hi)):
                out[i, :, h] = source[:, h]
            return out

        return {"patch_heads": patch}

    return _per_layer(loaded, corrupted, metric, between, step, heads, patches, first=0)


def exact_stream(
    loaded: LoadedModel,
    corrupted: dict[str, Tensor],
    clean: Stream,
    metric: Metric,
    between: Between,
    step: Step,
) -> Tensor:
    """(layers, T): the metric with the stream after layer l at position t copied from the
    clean run, a layer's positions a batch at a time (element i patches position lo + i)."""
    seq = clean.outputs[0].shape[1]

    def patches(layer: int, lo: int, hi: int) -> dict:
        source = clean.outputs[layer][0]  # (T, d)

        def patch(at: int, y: Tensor) -> Tensor:  # y: (batch, T, d)
            if at != layer:
                return y
            y = y.clone()
            index = torch.arange(hi - lo, device=y.device)
            y[index, index + lo] = source[lo:hi]
            return y

        return {"patch_stream": patch}

    return _per_layer(loaded, corrupted, metric, between, step, seq, patches, first=1)
