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
  positions) are patched together in one batch, one batch element per component.
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

Stop = Callable[[], bool]
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


def _batch(inputs: dict[str, Tensor], size: int) -> dict[str, Tensor]:
    return {name: value.expand(size, *value.shape[1:]) for name, value in inputs.items()}


def _per_layer(loaded, corrupted, metric, stop, step, batch: int, patches, first: int) -> Tensor:
    """(layers, batch): the metric of `batch` copies of the corrupted text, rerun once a layer
    with patches(layer) (run_stream's patch_heads or patch_stream) changing that layer. The
    blocks a rerun leaves alone hand on the corrupted run's outputs instead of running (half
    the work: `first` is 0 where the patch changes its layer's block, 1 where it changes only
    what the block hands on)."""
    returned: list = []
    run_stream(loaded, corrupted, keep=False, record=returned)
    rows = []
    for layer in range(len(returned)):
        if stop():
            raise StopPatching
        step(layer, len(returned))
        replay = Replay(layer + first, returned)
        run = run_stream(
            loaded, _batch(corrupted, batch), keep=False, replay=replay, **patches(layer)
        )
        rows.append(metric.of(loaded, run).double().cpu())
    return torch.stack(rows)


def exact_heads(
    loaded: LoadedModel,
    corrupted: dict[str, Tensor],
    clean: Stream,
    metric: Metric,
    stop: Stop,
    step: Step,
) -> Tensor:
    """(layers, heads): the metric with each head's output copied from the clean run, a layer's
    heads in one batch (element h patches head h)."""
    heads = clean.heads[0].shape[2]

    def patches(layer: int) -> dict:
        source = clean.heads[layer][0]  # (T, heads, head_dim)

        def patch(at: int, out: Tensor) -> Tensor:
            if at != layer:
                return out
            out = out.clone()
            for h in range(heads):
                out[h, :, h] = source[:, h]
            return out

        return {"patch_heads": patch}

    return _per_layer(loaded, corrupted, metric, stop, step, heads, patches, first=0)


def exact_stream(
    loaded: LoadedModel,
    corrupted: dict[str, Tensor],
    clean: Stream,
    metric: Metric,
    stop: Stop,
    step: Step,
) -> Tensor:
    """(layers, T): the metric with the stream after layer l at position t copied from the
    clean run, a layer's positions in one batch (element t patches position t)."""
    seq = clean.outputs[0].shape[1]

    def patches(layer: int) -> dict:
        source = clean.outputs[layer][0]  # (T, d)

        def patch(at: int, y: Tensor) -> Tensor:
            if at != layer:
                return y
            y = y.clone()
            index = torch.arange(seq, device=y.device)
            y[index, index] = source
            return y

        return {"patch_stream": patch}

    return _per_layer(loaded, corrupted, metric, stop, step, seq, patches, first=1)


class StopPatching(Exception):
    """The client stopped an exact patching run."""
