"""Which sequences each head keeps for HeadVis's samples, decided as the job runs.

HeadVis samples per head by interval of max_activation (attention_core.headvis): a warm-up (the
run's first `warmup_size` texts) sets the interval boundaries; every later text goes to one
interval per head; the top interval keeps the sequences of largest max_activation, each lower
one a uniform random sample. Here the lower intervals keep the sequences of smallest draw
(attention_core.headvis.priorities: fixed by seed, head and text), so that what a head keeps
does not depend on the order texts finish in, and a Dask run keeps exactly what an in-process
one does. The store keeps only what may still be kept, so its size does not grow with the corpus:
at most (n_intervals - 1) · samples_per_interval + samples_per_top_interval texts a head.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np

from atlas_engine.corpus.store import Run, SampleRow, Store, TextRow
from attention_core import headvis


@dataclass(frozen=True)
class HeadVisSettings:
    """A run's sampling settings, HeadVis's defaults; written to its pipeline_config."""

    n_intervals: int = 5
    samples_per_interval: int = 3
    samples_per_top_interval: int = 10
    sparse_topk_per_row: int = 8
    sparse_threshold: float = 0.005
    induction_attention_threshold: float = headvis.INDUCTION_THRESHOLD
    sample_seed: int = 0
    warmup_size: int = 1
    dtype: str = "float32"  # what the model ran in (pipeline_config.dtype)
    causal: bool = True  # False for an encoder (pipeline_config.causal)

    @classmethod
    def for_run(cls, planned: int, dtype: str = "float32", causal: bool = True) -> HeadVisSettings:
        return cls(warmup_size=headvis.warmup_size(planned), dtype=dtype, causal=causal)

    @classmethod
    def of(cls, run: Run) -> HeadVisSettings:
        return cls(**run.headvis) if run.headvis else cls.for_run(run.planned)

    def as_dict(self) -> dict:
        return asdict(self)

    @property
    def capacity(self) -> tuple[int, int, int]:
        return self.n_intervals, self.samples_per_interval, self.samples_per_top_interval


def coo_arrays(keys: np.ndarray, values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """attention_core.headvis.coo as arrays, for the store (no Python list of every entry):
    keys, values (L, k) -> (indices q · L + k increasing, int32; values, float32)."""
    length = keys.shape[0]
    rows, slots = np.nonzero(values > 0)
    flat = rows * length + keys[rows, slots]
    order = np.argsort(flat, kind="stable")
    return flat[order].astype(np.int32), values[rows, slots][order].astype(np.float32)


class Sampler:
    """Writes each finished text of a run with the samples it enters (Store.finish)."""

    def __init__(self, store: Store, run: Run) -> None:
        if run.headvis is None:
            store.set_headvis(run.id, HeadVisSettings.for_run(run.planned).as_dict())
            run = store.run(run.id)
        self.store, self.run = store, run
        self.settings = HeadVisSettings.of(run)
        self._edges: np.ndarray | None = None  # (heads, n_intervals - 1) once warmed up
        self._bounds = store.sample_bounds(run.id)
        self._head_ids = np.arange(run.layers * run.heads)

    def edges(self) -> np.ndarray | None:
        """The interval boundaries per head, once every warm-up text is finished."""
        if self._edges is None:
            idx, _, sums, _ = self.store.headvis_rows(self.run)
            warm = idx < self.settings.warmup_size
            if warm.sum() >= min(self.settings.warmup_size, self.run.planned):
                activation = sums[warm][..., headvis.SUMS.index("max_activation")]
                self._edges = headvis.boundaries(
                    activation.reshape(int(warm.sum()), -1), self.settings.n_intervals
                )
        return self._edges

    def _entering(self, idx: int, activation: np.ndarray, first: int = 0):
        """(interval, rank, may enter) per head, each (n,), of a text whose max_activation is
        `activation` (n,) on heads first.. first + n (layer · heads order): the heads whose
        samples it may enter by what was kept before (a (head, interval) not full, or the text
        ranks before its worst)."""
        edges = self.edges()
        if edges is None:
            raise RuntimeError(
                f"text {idx} finished before the warm-up's {self.settings.warmup_size} texts: "
                "describe the run's texts in order up to the warm-up"
            )
        heads = slice(first, first + activation.shape[0])
        interval = headvis.route(activation[None, :], edges[heads])[0]
        draws = headvis.priorities(self.settings.sample_seed, self._head_ids[heads], idx)
        top = interval == self.settings.n_intervals
        rank = np.where(top, -activation.astype(np.float64), draws)
        room = np.where(
            top, self.settings.samples_per_top_interval, self.settings.samples_per_interval
        )
        enters = np.ones(activation.shape[0], dtype=bool)
        for n in range(activation.shape[0]):
            layer, head = divmod(first + n, self.run.heads)
            held, worst = self._bounds.get((layer, head, int(interval[n])), (0, np.inf))
            enters[n] = not (held >= room[n] and rank[n] > worst)
        return interval, rank, enters

    def wanted(self, indices: list[int], activation: np.ndarray, first: int = 0) -> np.ndarray:
        """Which heads' sparse maps a batch of texts needs: indices (batch,), activation (batch,
        n) the max_activation of heads first.. first + n (layer · heads order) -> (batch, n)
        bool, the heads whose samples each text may enter (candidates' own test), none for a
        warm-up text. What a head keeps is then chosen from those alone (job.describe_batch)."""
        out = np.zeros(activation.shape, dtype=bool)
        for b, idx in enumerate(indices):
            if idx >= self.settings.warmup_size:
                out[b] = self._entering(idx, activation[b], first)[2]
        return out

    def candidates(self, idx: int, row: TextRow, keys: np.ndarray, values: np.ndarray):
        """The samples this text may enter: keys, values (layers · heads, L, k) its sparse rows
        (needed only for the heads that `wanted` names)."""
        if idx < self.settings.warmup_size:
            return []
        activation = row.headvis[..., headvis.SUMS.index("max_activation")].reshape(-1)
        interval, rank, enters = self._entering(idx, activation)
        found = []
        for n in np.flatnonzero(enters).tolist():
            layer, head = divmod(n, self.run.heads)
            indices, vals = coo_arrays(keys[n], values[n])
            if not len(indices):
                continue  # HeadVis offers a sequence only with a non-empty sparse map
            found.append(SampleRow(layer, head, int(interval[n]), float(rank[n]),
                                   float(activation[n]), indices, vals))  # fmt: skip
        return found

    def record(
        self, idx: int, row: TextRow, keys: np.ndarray, values: np.ndarray, seconds: float
    ) -> None:
        """Store one finished text and the samples it enters."""
        self.record_many([(idx, row, keys, values, seconds)])

    def record_many(self, texts: list[tuple[int, TextRow, np.ndarray, np.ndarray, float]]) -> None:
        """Store finished texts (idx, row, keys, values, seconds) and the samples they enter,
        one transaction (Store.finish_many); the warm-up's texts first, in one of their own,
        since the others' intervals are read from them. Every text's samples are chosen against
        what was kept before the batch, then each (head, interval) cut back to its capacity:
        what a head keeps is what one text at a time keeps."""
        warm = [t for t in texts if t[0] < self.settings.warmup_size]
        rest = [t for t in texts if t[0] >= self.settings.warmup_size]
        for part in (warm, rest):
            if not part:
                continue
            rows = [
                (idx, row, seconds, self.candidates(idx, row, keys, values))
                for idx, row, keys, values, seconds in part
            ]
            self.store.finish_many(self.run.id, rows, self.settings.capacity)
            if any(samples for *_, samples in rows):
                self._bounds = self.store.sample_bounds(self.run.id)
