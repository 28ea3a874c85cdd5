"""The corpus job: a corpus's texts through a model, each head described on each text, kept in
the store (atlas_engine.corpus.store) as each text finishes, so a job stopped or crashed resumes where
it was without computing a finished text again.

Per text, one forward pass with eager attention hands over every layer's maps as the model
computes them (atlas_engine.inference.forward.run_forward's keep_maps: no replay), and per layer:
every head statistic of the explorer's Head roles (attention_core.head_stats, the sliding
window's own visible keys where a layer has one), the attention-weighted distance histogram
and the few tokens each head reads most and that read most sharply
(attention_core.corpus_stats); and HeadVis's numbers (attention_core.headvis): the sums that pool
into its six metrics, max_activation, and the sparse map the heads that keep the text store
(atlas_engine.corpus.sampling).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np
import torch

from atlas_engine import compute
from atlas_engine.corpus.sampling import HeadVisSettings, Sampler
from atlas_engine.corpus.store import Run, Store, TextRow
from atlas_engine.corpus.texts import paragraphs, sequences
from atlas_engine.inference.encoding import encode
from atlas_engine.inference.forward import check_token_count
from atlas_engine.inference.tokens import display_tokens, token_facts
from atlas_engine.models import capture
from atlas_engine.models.loader import LoadedModel
from atlas_engine.models.placement import model_device
from attention_core import headvis
from attention_core.corpus_stats import (
    DISTANCE_EDGES,
    distance_histogram,
    strongest_of,
    token_weights,
)
from attention_core.head_stats import STATISTICS, TokenFacts, layer_statistics_by_rows

TOKENS_KEPT = 5  # a head's tokens kept per text and side
MAX_SEQUENCE_TOKENS = 512
BATCH_TEXTS = 8  # texts a batch at most (run_job's default; measured in bench/corpus_cost.py)
BUCKET_WINDOW = 64  # texts sorted by length together, to pad little (batches())
BATCH_MAP_BYTES = 512 * 2**20  # a batch's maps at most (float32, every layer and head, padded)


@dataclass(frozen=True)
class TextResult(TextRow):
    """A text described: what the store keeps, and every head's sparse map, from which the
    heads that keep the text take theirs."""

    keys: np.ndarray  # (layers · heads, L, k) int64: each row's kept keys
    values: np.ndarray  # (layers · heads, L, k) float32: their weights, 0 where none is kept


def plan(store: Store, loaded: LoadedModel, corpus: str, tokens: int, limit: int) -> Run:
    """The run of (model, corpus, tokens): the stored one, or a new one with its texts cut
    from the corpus (at most `limit`). An existing run keeps its texts: a resumed job reads
    exactly what the first one planned."""
    if not 16 <= tokens <= min(MAX_SEQUENCE_TOKENS, loaded.max_tokens):
        raise ValueError(
            f"sequences of {tokens} tokens: choose 16 to {min(MAX_SEQUENCE_TOKENS, loaded.max_tokens)}"
        )
    found = store.run_for(loaded.id, corpus, tokens)
    if found is not None and found.headvis is None:  # made before HeadVis's numbers were kept
        store.set_headvis(found.id, headvis_settings(loaded, found.planned).as_dict())
        found = store.run(found.id)
    if found is not None:
        return found

    def count(text: str) -> int:
        return len(loaded.tokenizer(text)["input_ids"])

    texts = list(sequences(paragraphs(corpus), count, tokens, limit))
    if not texts:
        raise ValueError(f"the corpus {corpus!r} gave no text")
    shape = (loaded.arch.num_layers, loaded.arch.num_heads)
    return store.create_run(
        loaded.id, corpus, tokens, shape, list(STATISTICS), list(DISTANCE_EDGES), texts,
        headvis_settings(loaded, len(texts)).as_dict(),
    )  # fmt: skip


def headvis_settings(loaded: LoadedModel, planned: int) -> HeadVisSettings:
    """HeadVis's default sampling for a run of `planned` texts, with the model's dtype and mask."""
    dtype = str(next(loaded.model.parameters()).dtype).removeprefix("torch.")
    return HeadVisSettings.for_run(planned, dtype, loaded.causal)


class _PassEnded(Exception):
    """Raised once the last layer's maps are kept: nothing after them is wanted."""


@dataclass(frozen=True)
class Batch:
    """Texts padded on the right to one length: inputs (batch, T) and each text's tokens."""

    inputs: dict[str, torch.Tensor]  # input_ids, attention_mask (1 real, 0 padding), ...
    lengths: torch.Tensor  # (batch,) int64: each text's tokens
    words: list[list[int]]  # word number of each token, per text (-1 for specials)


def encode_batch(loaded: LoadedModel, texts: list[str]) -> Batch:
    """Each text tokenised alone (as a request's pass tokenises it), then padded on the right
    with the tokenizer's pad token (0 where it has none: masked either way). Right, not left:
    a decoder numbers positions from the first token (Llama's RoPE, GPT-2's learned
    positions), so left padding would move every real token by the padding before it, and its
    maps would no longer be the text's own; on the right, every real query sees exactly the
    keys it sees alone, and padded keys get weight 0 through the mask. Encoders alike."""
    encoded = [encode(loaded.tokenizer, text, None) for text in texts]
    lengths = [int(inputs["input_ids"].shape[1]) for inputs, _ in encoded]
    for n in lengths:
        check_token_count(loaded, n, None)
    size = max(lengths)
    pad = loaded.tokenizer.pad_token_id or 0
    inputs = {}
    for name in encoded[0][0]:
        if name not in loaded.forward_inputs or name == "attention_mask":
            continue
        fill = pad if name == "input_ids" else 0
        out = torch.full((len(texts), size), fill, dtype=torch.long)
        for b, (one, _) in enumerate(encoded):
            out[b, : lengths[b]] = one[name][0]
        inputs[name] = out
    lengths_t = torch.tensor(lengths)
    inputs["attention_mask"] = (torch.arange(size)[None, :] < lengths_t[:, None]).long()
    return Batch(inputs, lengths_t, [words for _, words in encoded])


class _BatchRecorder(capture.Recorder):
    """Keeps each layer's maps (batch, heads, T, T) as eager attention computes them, in one
    float32 buffer on the model's device, with the keys each query may read (from the mask the
    layer was given); the pass ends after the last layer's maps."""

    def __init__(self, layers: list[torch.nn.Module], shape: tuple[int, ...], device) -> None:
        super().__init__()
        self.index = {id(module): i for i, module in enumerate(layers)}
        self.maps = torch.empty(shape, dtype=torch.float32, device=device)  # (B, L, H, T, T)
        self.visible: list[torch.Tensor | None] = [None] * len(layers)  # (B, T) per layer
        self._counted: dict[int, torch.Tensor] = {}  # id(mask) -> its (B, T) counts

    def on_call(self, module, q, k, v, mask, kw):
        out, weights = super().on_call(module, q, k, v, mask, kw)
        index = self.index.get(id(module))
        if index is None or weights is None:
            return out, weights
        self.maps[:, index] = weights  # (B, H, T, T), as float32
        if mask is not None:
            if id(mask) not in self._counted:
                allowed = mask if mask.dtype == torch.bool else mask == 0
                self._counted[id(mask)] = allowed[:, 0].sum(-1)  # (B, T)
            self.visible[index] = self._counted[id(mask)]
        if index == len(self.index) - 1:
            raise _PassEnded
        return out, weights


def batch_maps(loaded: LoadedModel, batch: Batch) -> tuple[torch.Tensor, list[torch.Tensor | None]]:
    """One forward pass over a padded batch with eager attention: (maps (batch, layers, heads,
    T, T) float32 on the model's device, exactly 0 on padded rows and keys; per layer the keys
    each query may read (batch, T), or None where the pass had no mask to read). Between two
    layers, short jobs waiting on the heavy lane run (atlas_engine.compute.run_beside), and a
    server shutting down stops the pass, as a request's pass does. Ends after the last layer's
    attention: nothing later is wanted."""
    device = model_device(loaded.model)
    inputs = {name: value.to(device) for name, value in batch.inputs.items()}
    size = int(batch.inputs["input_ids"].shape[1])
    layers, heads = loaded.arch.num_layers, loaded.arch.num_heads
    modules = loaded.attention_layers if loaded.replayable else []
    recorder = _BatchRecorder(modules, (len(batch.lengths), layers, heads, size, size), device)
    depth = compute.depth()

    def between_layers(module, args, kwargs):
        if compute.depth() != depth:
            return
        if compute.shutting_down():
            raise compute.ShuttingDown("the server is shutting down; the pass was stopped")
        compute.run_beside()  # a short job waiting goes between two layers

    with loaded.lock:
        handles = [m.register_forward_pre_hook(between_layers, with_kwargs=True) for m in modules]
        try:
            with torch.inference_mode(), capture.recording(recorder):
                try:
                    output = loaded.model(**inputs, output_attentions=not modules)
                except _PassEnded:
                    output = None
        finally:
            for handle in handles:
                handle.remove()
    maps = recorder.maps
    if output is not None:  # a model outside the capture path: the maps it returned
        if output.attentions is None or len(output.attentions) != layers:
            raise RuntimeError(f"'{loaded.id}' returned no attentions: it must run eagerly")
        for i, layer in enumerate(output.attentions):
            maps[:, i] = layer
    for b, n in enumerate(batch.lengths.tolist()):  # padded rows and keys hold nothing
        maps[b, :, :, n:] = 0.0
        maps[b, :, :, :, n:] = 0.0
    return maps, recorder.visible


def describe_text(
    loaded: LoadedModel, text: str, settings: HeadVisSettings | None = None
) -> TextResult:
    """Every head of the model on one text: describe_batch with a batch of one."""
    return describe_batch(loaded, [text], settings)[0]


def describe_batch(
    loaded: LoadedModel, texts: list[str], settings: HeadVisSettings | None = None
) -> list[TextResult]:
    """Every head of the model on each text (see the module docstring), the texts padded on the
    right into one batch (encode_batch) and run through one forward pass; every number is what
    the text alone gives, within float32 rounding (tests/atlas_engine/corpus/test_corpus_batch.py).
    The statistics run on the model's device: HeadVis's sums, sparse maps, the distance
    histograms and what the strongest tokens are ranked by over the whole batch at once; the
    head statistics and the token ranking per text, over its own rows and keys. The layers
    whose mask is plain (no sliding window) are described together, as one stack of heads."""
    settings = settings or HeadVisSettings()
    batch = encode_batch(loaded, texts)
    maps, visible = batch_maps(loaded, batch)
    count, layers, heads, size, _ = maps.shape
    device = maps.device
    flat = maps.view(count, layers * heads, size, size)  # every head of every layer
    ids = batch.inputs["input_ids"].to(device)  # (B, T)
    lengths = batch.lengths.to(device)
    sums, induction_rows = headvis.sequence_sums(
        flat, ids, lengths, settings.induction_attention_threshold
    )  # (B, L·H, SUMS), (B,)
    keys, values = headvis.sparse_rows(
        flat, lengths, settings.sparse_topk_per_row, settings.sparse_threshold
    )  # (B, L·H, T, k) each
    hist = distance_histogram(flat)  # (B, L·H, bins)
    special = torch.zeros(count, size, dtype=torch.bool)
    labels: list[list[str]] = []
    for b, n in enumerate(batch.lengths.tolist()):
        token_ids = batch.inputs["input_ids"][b, :n].tolist()
        shown, _, flags = display_tokens(loaded.tokenizer, token_ids)
        labels.append(shown)
        special[b, :n] = torch.tensor(flags)
    ignore = special.clone()
    ignore[:, 0] = True  # the first token: where heads park attention they do not use
    received, sharpest = token_weights(flat, ignore.to(device))  # (B, L·H, T) each
    results = []
    for b, n in enumerate(batch.lengths.tolist()):
        token_ids = batch.inputs["input_ids"][b, :n].tolist()
        facts = token_facts(loaded, _Tokens(token_ids, labels[b], special[b, :n].tolist(),
                                            batch.words[b]))  # fmt: skip
        facts = TokenFacts(*(t.to(device) for t in (facts.special, facts.separator, facts.word,
                                                    facts.ids)))  # fmt: skip
        stats = _head_statistics(loaded, flat[b, :, :n, :n], visible, b, n, facts)
        to_ids, to_weight, from_ids, from_weight = strongest_of(
            received[b, :, :n], sharpest[b, :, :n], facts.ids, TOKENS_KEPT
        )
        rows = []
        for side, found_ids, weights in (
            ("to", to_ids, to_weight),
            ("from", from_ids, from_weight),
        ):
            found_ids, weights = found_ids.cpu().numpy(), weights.cpu().numpy()
            for n_head, slot in zip(*np.nonzero((found_ids >= 0) & (weights > 0)), strict=True):
                rows.append((int(n_head) // heads, int(n_head) % heads, side,
                             int(found_ids[n_head, slot]), float(weights[n_head, slot])))  # fmt: skip
        shown = dict(zip(token_ids, labels[b], strict=True))
        k = min(settings.sparse_topk_per_row, n)
        results.append(
            TextResult(
                labels={token: shown[token] for token in {row[3] for row in rows}},
                tokens=n,
                stats=stats.cpu().numpy(),
                hist=hist[b].view(layers, heads, -1).cpu().numpy(),
                head_tokens=rows,
                headvis=sums[b].view(layers, heads, -1).cpu().numpy(),
                induction_rows=int(induction_rows[b]),
                pieces=loaded.tokenizer.batch_decode([[token] for token in token_ids]),
                keys=keys[b, :, :n, :k].cpu().numpy(),
                values=values[b, :, :n, :k].cpu().numpy(),
            )
        )
    return results


class _Tokens(NamedTuple):
    """What token_facts reads of a pass, for one text of a batch."""

    token_ids: list[int]
    tokens: list[str]
    special: list[bool]
    words: list[int]


def _head_statistics(
    loaded: LoadedModel,
    maps: torch.Tensor,
    visible: list[torch.Tensor | None],
    b: int,
    n: int,
    facts: TokenFacts,
) -> torch.Tensor:
    """Every head statistic of one text of a batch: maps (layers · heads, n, n), its own rows
    and keys -> (layers, heads, statistics). A layer whose mask lets a query read fewer keys
    than causality (or the whole text) does is a sliding window, described with those keys."""
    layers, heads = loaded.arch.num_layers, loaded.arch.num_heads
    default = torch.arange(1, n + 1) if loaded.causal else torch.full((n,), n)
    windows = []
    for counts in visible:
        own = None if counts is None else counts[b, :n].cpu()
        windows.append(None if own is None or torch.equal(own, default) else own)
    stats = torch.empty(layers, heads, len(STATISTICS), device=maps.device)
    plain = [i for i in range(layers) if windows[i] is None]
    groups = [(plain, None)] if plain else []
    groups += [([i], windows[i]) for i in range(layers) if windows[i] is not None]
    for group, window in groups:
        if len(group) == layers:
            stacked = maps  # (layers · heads, n, n), a view
        else:
            stacked = torch.cat([maps[i * heads : (i + 1) * heads] for i in group])
        keys_of = None if window is None else (lambda r0, r1, w=window: w[r0:r1])
        found = layer_statistics_by_rows([(0, stacked)], facts, loaded.causal, keys_of)
        values = torch.stack([found[name] for name in STATISTICS], dim=-1)
        stats[group] = values.view(len(group), heads, -1)
    return stats


def batches(
    loaded: LoadedModel,
    pending: list[tuple[int, str]],
    size: int = BATCH_TEXTS,
    window: int = BUCKET_WINDOW,
    map_bytes: int = BATCH_MAP_BYTES,
) -> Iterator[list[tuple[int, str]]]:
    """pending (idx, text), in order, cut into batches of at most `size` texts: each `window`
    texts sorted by their token count first, so that a batch's texts are of like length and
    pad little, and a batch cut where its maps (float32, every layer and head, padded to its
    longest text) would pass `map_bytes`: what bounds a batch's memory."""
    per_cell = 4 * loaded.arch.num_layers * loaded.arch.num_heads
    for start in range(0, len(pending), window):
        part = pending[start : start + window]
        counts = [len(loaded.tokenizer(text)["input_ids"]) for _, text in part]
        batch: list[tuple[int, str]] = []
        longest = 0
        for n, item in sorted(zip(counts, part, strict=True), key=lambda pair: pair[0]):
            grown = max(longest, n)
            if batch and (len(batch) == size or per_cell * grown**2 * (len(batch) + 1) > map_bytes):
                yield batch
                batch, grown = [], n
            batch.append(item)
            longest = grown
        if batch:
            yield batch


def run_job(
    loaded: LoadedModel,
    store: Store,
    run: Run,
    should_stop: Callable[[], bool] = lambda: False,
    progress: Callable[[int, int, float], None] = lambda done, planned, rate: None,
    batch_size: int = BATCH_TEXTS,
) -> Run:
    """Every text of the run not done yet, in batches (batches()); the warm-up's texts first,
    since the others' samples are chosen by their intervals (atlas_engine.corpus.sampling);
    stops between two batches when asked, each batch's texts written in one transaction.
    progress(texts done, texts planned, tokens a second so far), once a text."""
    done = run.done
    tokens = 0
    started = time.perf_counter()
    sampler = Sampler(store, run)
    pending = store.pending(run.id)
    warm = [item for item in pending if item[0] < sampler.settings.warmup_size]
    rest = [item for item in pending if item[0] >= sampler.settings.warmup_size]
    for part in (warm, rest):
        for batch in batches(loaded, part, batch_size):
            if should_stop():
                return store.run(run.id)
            began = time.perf_counter()
            found = describe_batch(loaded, [text for _, text in batch], sampler.settings)
            seconds = (time.perf_counter() - began) / len(batch)
            sampler.record_many([(idx, one, one.keys, one.values, seconds)
                                 for (idx, _), one in zip(batch, found, strict=True)])  # fmt: skip
            for one in found:
                done += 1
                tokens += one.tokens
                progress(done, run.planned, tokens / max(1e-9, time.perf_counter() - started))
    return store.run(run.id)
