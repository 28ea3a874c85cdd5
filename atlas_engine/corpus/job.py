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
from attention_core.corpus_stats import DISTANCE_EDGES, strongest_of, token_weights
from attention_core.head_stats import STATISTICS, BatchFacts, RowValues, batch_row_values

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
        self.maps = torch.empty(shape, dtype=torch.float32, device=device)  # (B, T, L · H, T)
        self.visible: list[torch.Tensor | None] = [None] * len(layers)  # (B, T) per layer
        self._counted: dict[int, torch.Tensor] = {}  # id(mask) -> its (B, T) counts

    def on_call(self, module, q, k, v, mask, kw):
        out, weights = super().on_call(module, q, k, v, mask, kw)
        index = self.index.get(id(module))
        if index is None or weights is None:
            return out, weights
        heads = weights.shape[1]
        self.maps[:, :, index * heads : (index + 1) * heads] = weights.transpose(1, 2)
        if mask is not None:
            if id(mask) not in self._counted:
                allowed = mask if mask.dtype == torch.bool else mask == 0
                self._counted[id(mask)] = allowed[:, 0].sum(-1)  # (B, T)
            self.visible[index] = self._counted[id(mask)]
        if index == len(self.index) - 1:
            raise _PassEnded
        return out, weights


def batch_maps(loaded: LoadedModel, batch: Batch) -> tuple[torch.Tensor, list[torch.Tensor | None]]:
    """One forward pass over a padded batch with eager attention: (maps (batch, layers · heads,
    T, T) float32 on the model's device, exactly 0 on padded rows and keys, held rows first
    (its memory is (batch, T, layers · heads, T), as attention_core.head_stats.batch_row_values
    reads it fastest); per layer the keys each query may read (batch, T), or None where the
    pass had no mask to read). Between two layers, short jobs waiting on the heavy lane run
    (atlas_engine.compute.run_beside), and a server shutting down stops the pass, as a
    request's pass does. Ends after the last layer's attention: nothing later is wanted."""
    device = model_device(loaded.model)
    inputs = {name: value.to(device) for name, value in batch.inputs.items()}
    size = int(batch.inputs["input_ids"].shape[1])
    layers, heads = loaded.arch.num_layers, loaded.arch.num_heads
    modules = loaded.attention_layers if loaded.replayable else []
    shape = (len(batch.lengths), size, layers * heads, size)
    recorder = _BatchRecorder(modules, shape, device)
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
    rows_first = recorder.maps  # (B, T, L · H, T)
    if output is not None:  # a model outside the capture path: the maps it returned
        if output.attentions is None or len(output.attentions) != layers:
            raise RuntimeError(f"'{loaded.id}' returned no attentions: it must run eagerly")
        for i, layer in enumerate(output.attentions):
            rows_first[:, :, i * heads : (i + 1) * heads] = layer.transpose(1, 2)
    for b, n in enumerate(batch.lengths.tolist()):  # padded rows and keys hold nothing
        rows_first[b, n:] = 0.0
        rows_first[b, :, :, n:] = 0.0
    return rows_first.transpose(1, 2), recorder.visible


def describe_text(
    loaded: LoadedModel, text: str, settings: HeadVisSettings | None = None
) -> TextResult:
    """Every head of the model on one text: describe_batch with a batch of one."""
    return describe_batch(loaded, [text], settings)[0]


def describe_batch(
    loaded: LoadedModel,
    texts: list[str],
    settings: HeadVisSettings | None = None,
    sparse_heads: Callable[[np.ndarray], np.ndarray] | None = None,
) -> list[TextResult]:
    """Every head of the model on each text (see the module docstring), the texts padded on the
    right into one batch (encode_batch) and run through one forward pass; every number is what
    the text alone gives, within float32 rounding (tests/atlas_engine/corpus/test_corpus_batch.py).
    The statistics run on the model's device: HeadVis's sums, sparse maps, the distance
    histograms and what the strongest tokens are ranked by over the whole batch at once; the
    head statistics and the token ranking per text, over its own rows and keys. The layers
    whose mask is plain (no sliding window) are described together, as one stack of heads.

    sparse_heads(max_activation (batch, layers · heads) float32) -> (batch, layers · heads)
    bool: the heads whose sparse maps are wanted (those whose samples the text may enter,
    Sampler.wanted; a top-k of every row, the costliest statistic here, for a few heads);
    the others' are left empty. Every head's by default."""
    settings = settings or HeadVisSettings()
    batch = encode_batch(loaded, texts)
    flat, visible = batch_maps(loaded, batch)  # (B, L·H, T, T), every head of every layer
    size = flat.shape[-1]
    layers, heads = loaded.arch.num_layers, loaded.arch.num_heads
    device = flat.device
    lengths = batch.lengths.to(device)
    facts, labels = _batch_facts(loaded, batch, device)
    ids = batch.inputs["input_ids"].to(device)  # (B, T)
    # HeadVis's max_activation: rows and keys from 1 (each row's maximum first: memory order)
    max_activation = flat[:, :, 1:, 1:].amax(-1).amax(-1) if size > 1 else flat.new_zeros(1)
    max_activation = max_activation.expand(flat.shape[:2])  # (B, L·H)
    keys, values = _sparse_maps(flat, lengths, settings, max_activation, sparse_heads)
    ignore = facts.special.clone()
    ignore[:, 0] = True  # the first token: where heads park attention they do not use
    received, sharpest = token_weights(flat, ignore)  # (B, L·H, T) each
    induction, induction_rows = headvis_induction(
        flat, ids, lengths, settings.induction_attention_threshold
    )  # (B, L·H), (B,)
    # Last, as it overwrites the maps: every statistic's rows, the histogram's and HeadVis's
    # squared distance among them.
    rows = batch_row_values(
        flat, facts, _visible_keys(loaded, visible, batch, heads, device), _extra_sets(size, device)
    )
    means = rows.means()  # {name: (B, L·H)}
    stats = torch.stack([means[name] for name in STATISTICS], dim=-1).cpu()  # (B, L·H, 12)
    hist = rows.extra[..., 1:].sum(dim=2).cpu()  # (B, L·H, bins): padded rows hold 0
    sums = headvis_sums(rows, induction, max_activation).cpu()  # (B, L·H, SUMS)
    keys, values = keys.cpu(), values.cpu()
    results = []
    for b, n in enumerate(batch.lengths.tolist()):
        token_ids = batch.inputs["input_ids"][b, :n].tolist()
        to_ids, to_weight, from_ids, from_weight = strongest_of(
            received[b, :, :n], sharpest[b, :, :n], facts.ids[b, :n], TOKENS_KEPT
        )
        read = []  # (layer, head, side, token, weight)
        for side, found_ids, weights in (
            ("to", to_ids, to_weight),
            ("from", from_ids, from_weight),
        ):
            found_ids, weights = found_ids.cpu().numpy(), weights.cpu().numpy()
            for n_head, slot in zip(*np.nonzero((found_ids >= 0) & (weights > 0)), strict=True):
                read.append((int(n_head) // heads, int(n_head) % heads, side,
                             int(found_ids[n_head, slot]), float(weights[n_head, slot])))  # fmt: skip
        shown = dict(zip(token_ids, labels[b], strict=True))
        k = min(settings.sparse_topk_per_row, n)
        results.append(
            TextResult(
                labels={token: shown[token] for token in {row[3] for row in read}},
                tokens=n,
                stats=stats[b].view(layers, heads, -1).numpy(),
                hist=hist[b].view(layers, heads, -1).numpy(),
                head_tokens=read,
                headvis=sums[b].view(layers, heads, -1).numpy(),
                induction_rows=int(induction_rows[b]),
                pieces=loaded.tokenizer.batch_decode([[token] for token in token_ids]),
                keys=keys[b, :, :n, :k].numpy(),
                values=values[b, :, :n, :k].numpy(),
            )
        )
    return results


class _Tokens(NamedTuple):
    """What token_facts reads of a pass, for one text of a batch."""

    token_ids: list[int]
    tokens: list[str]
    special: list[bool]
    words: list[int]


def _batch_facts(
    loaded: LoadedModel, batch: Batch, device: torch.device
) -> tuple[BatchFacts, list[list[str]]]:
    """What the statistics need to know of each token of a padded batch, and each text's
    labels: token_facts of each text alone, padded (atlas_engine.inference.tokens)."""
    count, size = batch.inputs["input_ids"].shape
    special = torch.zeros(count, size, dtype=torch.bool)
    separator = torch.zeros(count, size, dtype=torch.bool)
    word = torch.full((count, size), -1, dtype=torch.int64)
    ids = torch.full((count, size), -1, dtype=torch.int64)
    labels = []
    for b, n in enumerate(batch.lengths.tolist()):
        token_ids = batch.inputs["input_ids"][b, :n].tolist()
        shown, _, flags = display_tokens(loaded.tokenizer, token_ids)
        facts = token_facts(loaded, _Tokens(token_ids, shown, flags, batch.words[b]))
        special[b, :n], separator[b, :n] = facts.special, facts.separator
        word[b, :n], ids[b, :n] = facts.word, facts.ids
        labels.append(shown)
    held = (special, separator, word, ids, batch.lengths)
    return BatchFacts(*(t.to(device) for t in held)), labels


def _visible_keys(
    loaded: LoadedModel,
    visible: list[torch.Tensor | None],
    batch: Batch,
    heads: int,
    device: torch.device,
) -> torch.Tensor:
    """(batch, layers · heads, T): the keys each query may read in each layer, as its mask
    said (a sliding window reads fewer); where a layer had no mask to read, i + 1 in a causal
    map and the text's length in a full one."""
    size = batch.inputs["input_ids"].shape[1]
    lengths = batch.lengths.to(device)
    i = torch.arange(size, device=device)
    default = (
        (i + 1).expand(len(lengths), -1) if loaded.causal else lengths[:, None].expand(-1, size)
    )
    per_layer = torch.stack([default if v is None else v.to(device) for v in visible], dim=1)
    return per_layer.repeat_interleave(heads, dim=1)  # (B, L · H, T)


def _sparse_maps(
    maps: torch.Tensor,
    lengths: torch.Tensor,
    settings: HeadVisSettings,
    max_activation: torch.Tensor,
    sparse_heads: Callable[[np.ndarray], np.ndarray] | None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """HeadVis's sparse maps (attention_core.headvis.sparse_rows) of the heads sparse_heads
    names, every head's where it is None: maps (B, H, T, T) -> keys, values (B, H, T, k), 0 and
    empty for the heads left out."""
    top, threshold = settings.sparse_topk_per_row, settings.sparse_threshold
    if sparse_heads is None:
        return headvis.sparse_rows(maps, lengths, top, threshold)
    chosen = torch.from_numpy(sparse_heads(max_activation.float().cpu().numpy()))
    at = chosen.nonzero().to(maps.device)  # (P, 2): text, head
    count, heads, size, _ = maps.shape
    k = min(top, size)
    keys = torch.zeros(count, heads, size, k, dtype=torch.int64, device=maps.device)
    values = torch.zeros(count, heads, size, k, dtype=torch.float32, device=maps.device)
    if len(at):
        picked = maps[at[:, 0], at[:, 1]][:, None]  # (P, 1, T, T)
        found_keys, found_values = headvis.sparse_rows(picked, lengths[at[:, 0]], top, threshold)
        keys[at[:, 0], at[:, 1]] = found_keys[:, 0]
        values[at[:, 0], at[:, 1]] = found_values[:, 0]
    return keys, values


def _extra_sets(size: int, device: torch.device) -> torch.Tensor:
    """(T, T, 1 + bins) key sets per (query, key) for batch_row_values: the squared distance
    (HeadVis's variance), then one set per bin of attention_core.corpus_stats.DISTANCE_EDGES
    (the distance histogram: a row's shares on them are its histogram)."""
    i = torch.arange(size, device=device)
    distance = (i[:, None] - i[None, :]).abs()  # (T, T)
    edges = torch.tensor(DISTANCE_EDGES, device=device)
    bins = torch.bucketize(distance, edges, right=True) - 1  # (T, T) in 0 .. bins - 1
    out = torch.empty(size, size, 1 + len(DISTANCE_EDGES), device=device)
    out[..., 0] = distance * distance
    out[..., 1:] = torch.nn.functional.one_hot(bins, len(DISTANCE_EDGES))
    return out


def headvis_induction(
    maps: torch.Tensor, ids: torch.Tensor, lengths: torch.Tensor, threshold: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """HeadVis's thresholded induction sum (attention_core.headvis.sequence_sums' column 5),
    read only at the induction pairs: maps (batch, heads, T, T) -> (sums (batch, heads),
    induction_rows (batch,))."""
    pairs, counted = headvis.induction_pairs(ids, lengths)  # (B, T, T) bool
    at = pairs.nonzero()  # (P, 3): text, query, key
    picked = maps[at[:, 0], :, at[:, 1], at[:, 2]]  # (P, heads)
    kept = torch.where(picked >= threshold, picked, 0.0).double()
    sums = torch.zeros(maps.shape[0], maps.shape[1], dtype=torch.float64, device=maps.device)
    return sums.index_add_(0, at[:, 0], kept), counted


def headvis_sums(
    rows: RowValues, induction: torch.Tensor, max_activation: torch.Tensor
) -> torch.Tensor:
    """attention_core.headvis.sequence_sums (where HeadVis's sums are defined) from the rows'
    values Atlas's statistics computed already: the diagonal, the first subdiagonal, each
    row's entropy in nats and its weighted distance and squared distance (rows.extra[..., 0]),
    summed over the real rows (padded rows hold 0 in each), beside the induction sum and
    max_activation read from the maps (headvis_induction) -> (batch, heads, len(SUMS))
    float32; tests/atlas_engine/corpus/test_corpus_batch.py holds it to sequence_sums."""
    per_row = (rows.values["self"], rows.values["previous"], rows.entropy_nats,
               rows.values["distance"], rows.extra[..., 0])  # fmt: skip
    columns = [values.sum(-1, dtype=torch.float64) for values in per_row]
    columns += [induction, max_activation.double().expand_as(induction)]
    return torch.stack(columns, dim=-1).float()


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
            indices = [idx for idx, _ in batch]
            found = describe_batch(
                loaded, [text for _, text in batch], sampler.settings,
                lambda activation, at=indices: sampler.wanted(at, activation),
            )  # fmt: skip
            seconds = (time.perf_counter() - began) / len(batch)
            sampler.record_many([(idx, one, one.keys, one.values, seconds)
                                 for (idx, _), one in zip(batch, found, strict=True)])  # fmt: skip
            for one in found:
                done += 1
                tokens += one.tokens
                progress(done, run.planned, tokens / max(1e-9, time.perf_counter() - started))
    return store.run(run.id)
