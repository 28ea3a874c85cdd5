"""A batch of texts is described as each text alone (atlas_engine.corpus.job.describe_batch):
every statistic, histogram, token, HeadVis sum and sparse map of a text in a padded batch equals
what one forward pass over that text alone gives (the explorer's own pass, run_forward, and the
per-text functions), on a decoder, an encoder and a decoder with a sliding window; padding
leaks into no number. And the store's bulk write keeps what one text at a time keeps."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from app.main import create_app
from atlas_engine.corpus.job import batches, describe_batch, plan, run_job
from atlas_engine.corpus.sampling import HeadVisSettings, Sampler, coo_arrays
from atlas_engine.corpus.store import Store
from atlas_engine.inference.forward import run_forward
from atlas_engine.inference.tokens import token_facts
from atlas_engine.services.head_statistics import statistics_of
from attention_core import headvis
from attention_core.corpus_stats import distance_histogram, strongest_tokens
from attention_core.head_stats import STATISTICS
from tests.atlas_engine.corpus.test_corpus import PROSE
from tests.conftest import make_settings

pytestmark = pytest.mark.slow

TEXTS = [
    "A short one.",  # fewer tokens than the sparse map's top 8
    "The cat sat on the mat, and then the cat sat on the mat again, as cats do.",
    " ".join(PROSE.split()[:60]),  # past mistral-tiny's window of 48
    "Heads read the previous token.",
]
SETTINGS = HeadVisSettings(warmup_size=1)


@pytest.fixture(scope="module")
def manager(local_checkpoints):
    return create_app(make_settings(local_checkpoints)).state.manager


def alone(loaded, text: str) -> dict:
    """What one text alone gives: its own forward pass's maps through the per-text functions."""
    result = run_forward(loaded, text)
    maps = result.all_maps()  # (layers, heads, T, T)
    layers, heads, seq, _ = maps.shape
    flat = maps.flatten(0, 1)
    facts = token_facts(loaded, result)
    ignore = facts.special.clone()
    ignore[0] = True
    lengths = torch.tensor([seq])
    sums, rows = headvis.sequence_sums(flat[None], facts.ids[None], lengths)
    keys, values = headvis.sparse_rows(flat[None], lengths, 8, SETTINGS.sparse_threshold)
    return {
        "stats": statistics_of(loaded, result).values,
        "hist": distance_histogram(flat).view(layers, heads, -1),
        "tokens": strongest_tokens(flat, facts.ids, ignore, 5),
        "sums": sums[0].view(layers, heads, -1),
        "rows": int(rows[0]),
        "sparse": [
            headvis.coo(k.numpy(), v.numpy()) for k, v in zip(keys[0], values[0], strict=True)
        ],
        "pieces": [loaded.tokenizer.decode([t]) for t in result.token_ids],
        "seq": seq,
    }


def close(a, b) -> None:
    torch.testing.assert_close(
        torch.as_tensor(np.asarray(a)), torch.as_tensor(np.asarray(b)),
        rtol=1e-5, atol=1e-6, equal_nan=True,
    )  # fmt: skip


@pytest.mark.parametrize("model", ["local/qwen2-tiny", "local/bert-tiny", "local/mistral-tiny"])
def test_a_text_in_a_padded_batch_gives_what_it_gives_alone(manager, model):
    loaded = manager.get(model)
    found = describe_batch(loaded, TEXTS, SETTINGS)
    lengths = [one.tokens for one in found]
    assert len(set(lengths)) == len(TEXTS)  # every text padded but the longest
    for text, one in zip(TEXTS, found, strict=True):
        expected = alone(loaded, text)
        assert one.tokens == expected["seq"]
        for i, name in enumerate(STATISTICS):
            close(one.stats[..., i], expected["stats"][name])
        close(one.hist, expected["hist"])
        np.testing.assert_allclose(one.hist.sum(-1), one.tokens, rtol=1e-5)  # no padding in it
        close(one.headvis, expected["sums"])
        assert one.induction_rows == expected["rows"]
        assert one.pieces == expected["pieces"]
        to_ids, to_weight, from_ids, from_weight = expected["tokens"]
        heads = loaded.arch.num_heads
        for side, ids, weights in (("to", to_ids, to_weight), ("from", from_ids, from_weight)):
            mine = {(r[0], r[1], r[3]): r[4] for r in one.head_tokens if r[2] == side}
            theirs = {
                (n // heads, n % heads, int(t)): float(w)
                for n in range(ids.shape[0])
                for t, w in zip(ids[n], weights[n], strict=True)
                if t >= 0 and w > 0
            }
            assert mine.keys() == theirs.keys()
            close(list(mine.values()), [theirs[key] for key in mine])
        assert one.keys.shape[:2] == (one.stats.shape[0] * heads, one.tokens)
        for n, (indices, values) in enumerate(expected["sparse"]):
            got = headvis.coo(one.keys[n], one.values[n])
            assert got[0] == indices, (model, n)
            close(got[1], values)
            as_arrays = coo_arrays(one.keys[n], one.values[n])  # what the store keeps
            assert as_arrays[0].tolist() == indices and as_arrays[1].tolist() == got[1]


def test_batches_sort_by_length_within_a_window_and_bound_their_maps(manager):
    loaded = manager.get("local/qwen2-tiny")
    pending = list(enumerate(TEXTS * 3))
    found = list(batches(loaded, pending, size=4, window=6))
    assert sorted(i for batch in found for i, _ in batch) == list(range(12))
    assert all(len(batch) <= 4 for batch in found)
    assert {i for i, _ in found[0]} | {i for i, _ in found[1]} == set(range(6))
    count = lambda text: len(loaded.tokenizer(text)["input_ids"])  # noqa: E731
    assert [count(t) for _, t in found[0]] == sorted(count(t) for _, t in found[0])
    tiny = list(batches(loaded, pending, size=4, map_bytes=1))  # no two texts fit
    assert [len(batch) for batch in tiny] == [1] * 12


def test_a_job_in_batches_stores_what_one_text_at_a_time_stores(manager, tmp_path):
    """Batches of 1 and 3 (each computing only the sparse maps its samples may take), and every
    head's sparse map computed for one batch of all: the same statistics and samples."""
    loaded = manager.get("local/qwen2-tiny")
    source = tmp_path / "texts.txt"
    source.write_text(PROSE)
    stores = []
    for size in (1, 3):
        store = Store(tmp_path / f"{size}.sqlite")
        run = run_job(loaded, store, plan(store, loaded, str(source), 40, limit=8), batch_size=size)
        assert run.done == run.planned >= 6
        stores.append((store, run))
    store = Store(tmp_path / "all.sqlite")
    run = plan(store, loaded, str(source), 40, limit=8)
    sampler = Sampler(store, run)
    pending = store.pending(run.id)
    for part in (pending[: sampler.settings.warmup_size], pending[sampler.settings.warmup_size :]):
        found = describe_batch(loaded, [text for _, text in part], sampler.settings)
        sampler.record_many([(idx, one, one.keys, one.values, 0.1)
                             for (idx, _), one in zip(part, found, strict=True)])  # fmt: skip
    stores.append((store, store.run(run.id)))
    (first, run_first), *others = stores
    heads = [(layer, head) for layer in range(run_first.layers) for head in range(run_first.heads)]

    def kept(store, run):
        return {
            at: [(i, s.interval, s.indices.tolist()) for i, s in store.samples(run, *at)]
            for at in heads
        }

    idx_a, stats_a, hist_a = first.statistics(run_first)
    for other, run_other in others:
        idx_b, stats_b, hist_b = other.statistics(run_other)
        assert idx_a.tolist() == idx_b.tolist()
        close(stats_a, stats_b)
        close(hist_a, hist_b)
        assert kept(first, run_first) == kept(other, run_other)
    assert any(kept(first, run_first).values())


def test_a_bulk_write_keeps_the_first_and_cuts_samples_once(manager, tmp_path):
    loaded = manager.get("local/qwen2-tiny")
    source = tmp_path / "texts.txt"
    source.write_text(PROSE)
    store = Store(tmp_path / "c.sqlite")
    run = plan(store, loaded, str(source), 40, limit=8)
    sampler = Sampler(store, run)
    texts = store.pending(run.id)
    found = describe_batch(loaded, [t for _, t in texts], sampler.settings)
    items = [(i, r, r.keys, r.values, 0.1) for (i, _), r in zip(texts, found, strict=True)]
    sampler.record_many(items)
    first = store.statistics(store.run(run.id))
    sampler.record_many(items)  # written twice: the first kept, nothing added
    again = store.statistics(store.run(run.id))
    assert store.run(run.id).done == len(texts)
    np.testing.assert_array_equal(first[1], again[1])
    per_interval = sampler.settings.samples_per_interval
    for layer in range(2):
        for head in range(4):
            kept = store.samples(store.run(run.id), layer, head)
            lower = [s for _, s in kept if s.interval < sampler.settings.n_intervals]
            assert all(
                sum(1 for s in lower if s.interval == k) <= per_interval for k in range(1, 5)
            )
