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
from attention_core.corpus_stats import DISTANCE_EDGES, strongest_of
from attention_core.head_stats import (
    STATISTICS,
    BatchFacts,
    RowValues,
    batch_row_values,
    row_sets,
)

TOKENS_KEPT = 5  # a head's tokens kept per text and side
MAX_SEQUENCE_TOKENS = 512
BATCH_TEXTS = 8  # texts a batch at most (run_job's default; measured in bench/corpus_cost.py)
BUCKET_WINDOW = 64  # texts sorted by length together, to pad little (batches())
BATCH_MAP_BYTES = 64 * 2**20  # one layer's maps of a batch at most (float32, padded)


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
    """Hands each layer's maps (batch, heads, T, T), as eager attention computes them, to
    `sink` with the keys each query may read (batch, T) from the mask the layer was given (None
    where it had none); the pass ends after the last layer's maps."""

    def __init__(self, layers: list[torch.nn.Module], sink) -> None:
        super().__init__()
        self.index = {id(module): i for i, module in enumerate(layers)}
        self.sink = sink
        self._counted: dict[int, torch.Tensor] = {}  # id(mask) -> its (B, T) counts

    def on_call(self, module, q, k, v, mask, kw):
        out, weights = super().on_call(module, q, k, v, mask, kw)
        index = self.index.get(id(module))
        if index is None or weights is None:
            return out, weights
        visible = None
        if mask is not None:
            if id(mask) not in self._counted:
                allowed = mask if mask.dtype == torch.bool else mask == 0
                self._counted[id(mask)] = allowed[:, 0].sum(-1)  # (B, T)
            visible = self._counted[id(mask)]
        self.sink(index, weights, visible)
        if index == len(self.index) - 1:
            raise _PassEnded
        return out, None  # its maps are described: nothing later reads them


def run_batch(loaded: LoadedModel, batch: Batch, sink) -> None:
    """One forward pass over a padded batch with eager attention, each layer's maps handed to
    sink(layer, maps (batch, heads, T, T) on the model's device, visible keys (batch, T) or
    None) as the layer computes them, so no batch's worth of maps is ever held. Between two
    layers, short jobs waiting on the heavy lane run (atlas_engine.compute.run_beside), and a
    server shutting down stops the pass, as a request's pass does. Ends after the last layer's
    attention: nothing later is wanted. A model outside the capture path returns its maps,
    handed over after the pass."""
    device = model_device(loaded.model)
    inputs = {name: value.to(device) for name, value in batch.inputs.items()}
    modules = loaded.attention_layers if loaded.replayable else []
    recorder = _BatchRecorder(modules, sink)
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
    if output is not None:
        layers = output.attentions
        if layers is None or len(layers) != loaded.arch.num_layers:
            raise RuntimeError(f"'{loaded.id}' returned no attentions: it must run eagerly")
        for i, maps in enumerate(layers):
            sink(i, maps, None)


def describe_text(
    loaded: LoadedModel, text: str, settings: HeadVisSettings | None = None
) -> TextResult:
    """Every head of the model on one text: describe_batch with a batch of one."""
    return describe_batch(loaded, [text], settings)[0]


SparseHeads = Callable[[int, np.ndarray], np.ndarray]
"""(first head, max_activation (batch, n) of heads first.. first + n in layer · heads order)
-> (batch, n) bool: the heads whose sparse maps are wanted (Sampler.wanted)."""


def describe_batch(
    loaded: LoadedModel,
    texts: list[str],
    settings: HeadVisSettings | None = None,
    sparse_heads: SparseHeads | None = None,
) -> list[TextResult]:
    """Every head of the model on each text (see the module docstring), the texts padded on the
    right into one batch (encode_batch) and run through one forward pass; every number is what
    the text alone gives, within float32 rounding (tests/atlas_engine/corpus/test_corpus_batch.py).

    Each layer is described as the pass leaves it, on the model's device, for the whole batch
    at once (_LayerStatistics): Atlas's statistics with the distance histogram and HeadVis's
    sums from one matrix product a row (attention_core.head_stats.batch_row_values), what the
    strongest tokens are ranked by, HeadVis's induction sum and max_activation, and its sparse
    maps of the heads sparse_heads names (those whose samples the text may enter: a top-k of
    every row, the costliest number here, for a few heads; every head's by default, the
    others' left empty). Then per text, its token ranking and its result."""
    settings = settings or HeadVisSettings()
    batch = encode_batch(loaded, texts)
    device = model_device(loaded.model)
    facts, labels = _batch_facts(loaded, batch, device)
    layer = _LayerStatistics(loaded, batch, facts, settings, sparse_heads)
    run_batch(loaded, batch, layer)
    found = layer.gathered()
    heads = loaded.arch.num_heads
    results = []
    for b, n in enumerate(batch.lengths.tolist()):
        token_ids = batch.inputs["input_ids"][b, :n].tolist()
        to_ids, to_weight, from_ids, from_weight = strongest_of(
            found["received"][b, :, :n], found["sharpest"][b, :, :n], facts.ids[b, :n],
            TOKENS_KEPT,
        )  # fmt: skip
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
                stats=found["stats"][b].view(-1, heads, len(STATISTICS)).numpy(),
                hist=found["hist"][b].view(-1, heads, len(DISTANCE_EDGES)).numpy(),
                head_tokens=read,
                headvis=found["sums"][b].view(-1, heads, len(headvis.SUMS)).numpy(),
                induction_rows=int(layer.induction_rows[b]),
                pieces=loaded.tokenizer.batch_decode([[token] for token in token_ids]),
                keys=found["keys"][b, :, :n, :k].numpy(),
                values=found["values"][b, :, :n, :k].numpy(),
            )
        )
    return results


class _LayerStatistics:
    """run_batch's sink for describe_batch: every number of one layer's maps for the whole
    batch, kept per layer (each a few numbers a head, a row or a kept key) and gathered at the
    end into (batch, layers · heads, ...) on the host."""

    def __init__(self, loaded, batch: Batch, facts: BatchFacts, settings, sparse_heads) -> None:
        self.loaded, self.settings, self.sparse_heads = loaded, settings, sparse_heads
        self.lengths = facts.lengths
        self.size = int(batch.inputs["input_ids"].shape[1])
        device = facts.ids.device
        self.ids = batch.inputs["input_ids"].to(device)  # (B, T)
        self.ignore = facts.special.clone()
        self.ignore[:, 0] = True  # the first token: where heads park attention they do not use
        self.other_specials = facts.special.clone()
        self.other_specials[:, 0] = False
        self.other_specials = self.other_specials.nonzero()  # (Q, 2): text, special key from 1
        self.sets = row_sets(facts, _extra_sets(self.size, device))
        self.pairs, self.induction_rows = headvis.induction_pairs(self.ids, self.lengths)
        i = torch.arange(self.size, device=device)
        count = len(self.lengths)
        self.default_visible = (
            (i + 1).expand(count, -1)
            if loaded.causal
            else self.lengths[:, None].expand(-1, self.size)
        )  # (B, T): where a layer had no mask to read
        self.kept: dict[str, list[torch.Tensor]] = {}

    def __call__(self, index: int, maps: torch.Tensor, visible: torch.Tensor | None) -> None:
        weights = maps.float()  # (B, H, T, T): the model's own tensor where it is float32
        for b, n in enumerate(self.lengths.tolist()):  # padded rows and keys hold nothing
            weights[b, :, n:] = 0.0
            weights[b, :, :, n:] = 0.0
        heads = weights.shape[1]
        visible = self.default_visible if visible is None else visible.to(weights.device)
        rows = batch_row_values(weights, self.sets, visible[:, None, :].expand(-1, heads, -1))
        means = rows.means()
        # What the strongest tokens rank: the weight each key receives, the first token and
        # specials aside (corpus_stats.token_weights), then each query's sharpest weight.
        received = weights.sum(dim=-2).masked_fill(self.ignore[:, None, :], 0.0)  # (B, H, T)
        induction = self._induction(weights)
        sharpest, activation = self._sharpest(weights)
        keys, values = self._sparse(index * heads, weights, activation)
        found = {
            "stats": torch.stack([means[name] for name in STATISTICS], dim=-1),  # (B, H, 12)
            "hist": rows.extra[..., 1:].sum(dim=2),  # (B, H, bins): padded rows hold 0
            "sums": self._headvis_sums(rows, induction, activation),  # (B, H, SUMS)
            "received": received,
            "sharpest": sharpest,
            "keys": keys,
            "values": values,
        }
        for name, value in found.items():
            self.kept.setdefault(name, []).append(value)

    def _sharpest(self, weights: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(sharpest (B, H, T): each query's largest weight on a key neither the first nor
        special, as corpus_stats.token_weights ranks them; max_activation (B, H): HeadVis's
        largest weight of rows and keys from 1) in one read of the maps: the special keys'
        columns (a few a text) are read aside and set to 0 for that read, then put back."""
        count, heads, size, _ = weights.shape
        if size == 1:
            return weights.new_zeros(count, heads, size), weights.new_zeros(count, heads)
        at = self.other_specials  # (Q, 2): text, special key from 1
        special = weights.new_zeros(count, heads, size)  # each row's largest on a special key
        if len(at):
            columns = weights[at[:, 0], :, :, at[:, 1]]  # (Q, H, T)
            texts = at[:, 0, None, None].expand_as(columns)
            special.scatter_reduce_(0, texts, columns, reduce="amax")
            weights[at[:, 0], :, :, at[:, 1]] = 0.0
        sharpest = weights[..., 1:].amax(dim=-1)  # (B, H, T)
        if len(at):
            weights[at[:, 0], :, :, at[:, 1]] = columns
        activation = torch.maximum(sharpest, special)[:, :, 1:].amax(dim=-1)
        return sharpest, activation

    def gathered(self) -> dict[str, torch.Tensor]:
        """Every layer's numbers, (batch, layers · heads, ...), on the host but the token
        weights (read on the device per text)."""
        out = {name: torch.cat(parts, dim=1) for name, parts in self.kept.items()}
        for name in ("stats", "hist", "sums", "keys", "values"):
            out[name] = out[name].cpu()
        return out

    def _sparse(self, first: int, weights: torch.Tensor, activation: torch.Tensor):
        """HeadVis's sparse maps (attention_core.headvis.sparse_rows) of the heads
        sparse_heads names, every head's where it is None: (B, H, T, k) keys and values, 0 and
        empty for the heads left out."""
        top, threshold = self.settings.sparse_topk_per_row, self.settings.sparse_threshold
        if self.sparse_heads is None:
            return headvis.sparse_rows(weights, self.lengths, top, threshold)
        chosen = torch.from_numpy(self.sparse_heads(first, activation.cpu().numpy()))
        at = chosen.nonzero().to(weights.device)  # (P, 2): text, head
        count, heads, size, _ = weights.shape
        k = min(top, size)
        keys = torch.zeros(count, heads, size, k, dtype=torch.int64, device=weights.device)
        values = torch.zeros(count, heads, size, k, dtype=torch.float32, device=weights.device)
        if len(at):
            picked = weights[at[:, 0], at[:, 1]][:, None]  # (P, 1, T, T)
            found = headvis.sparse_rows(picked, self.lengths[at[:, 0]], top, threshold)
            keys[at[:, 0], at[:, 1]] = found[0][:, 0]
            values[at[:, 0], at[:, 1]] = found[1][:, 0]
        return keys, values

    def _induction(self, weights: torch.Tensor) -> torch.Tensor:
        """HeadVis's thresholded induction sum (attention_core.headvis.sequence_sums' column
        5), read only at the batch's induction pairs: (B, H) float64."""
        at = self.pairs.nonzero()  # (P, 3): text, query, key
        picked = weights[at[:, 0], :, at[:, 1], at[:, 2]]  # (P, heads)
        kept = torch.where(picked >= self.settings.induction_attention_threshold, picked, 0.0)
        out = torch.zeros(weights.shape[:2], dtype=torch.float64, device=weights.device)
        return out.index_add_(0, at[:, 0], kept.double())

    @staticmethod
    def _headvis_sums(
        rows: RowValues, induction: torch.Tensor, activation: torch.Tensor
    ) -> torch.Tensor:
        """attention_core.headvis.sequence_sums (where HeadVis's sums are defined) of one
        layer, from the rows' values Atlas's statistics computed already: the diagonal, the
        first subdiagonal, each row's entropy in nats and its weighted distance and squared
        distance (rows.extra[..., 0]), summed over the real rows (padded rows hold 0 in each);
        then the induction sum and max_activation -> (batch, heads, len(SUMS)) float32.
        tests/atlas_engine/corpus/test_corpus_batch.py holds it to sequence_sums."""
        per_row = (rows.values["self"], rows.values["previous"], rows.entropy_nats,
                   rows.values["distance"], rows.extra[..., 0])  # fmt: skip
        columns = [values.sum(-1, dtype=torch.float64) for values in per_row]
        columns += [induction, activation.double()]
        return torch.stack(columns, dim=-1).float()


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


def batches(
    loaded: LoadedModel,
    pending: list[tuple[int, str]],
    size: int = BATCH_TEXTS,
    window: int = BUCKET_WINDOW,
    map_bytes: int = BATCH_MAP_BYTES,
) -> Iterator[list[tuple[int, str]]]:
    """pending (idx, text), in order, cut into batches of at most `size` texts: each `window`
    texts sorted by their token count first, so that a batch's texts are of like length and
    pad little, and a batch cut where one layer's maps (float32, every head, padded to its
    longest text) would pass `map_bytes`: what bounds a batch's memory."""
    per_cell = 4 * loaded.arch.num_heads  # one layer's maps, float32: all a batch holds at once
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
                lambda first, activation, at=indices: sampler.wanted(at, activation, first),
            )  # fmt: skip
            seconds = (time.perf_counter() - began) / len(batch)
            sampler.record_many([(idx, one, one.keys, one.values, seconds)
                                 for (idx, _), one in zip(batch, found, strict=True)])  # fmt: skip
            for one in found:
                done += 1
                tokens += one.tokens
                progress(done, run.planned, tokens / max(1e-9, time.perf_counter() - started))
    return store.run(run.id)
