"""HeadVis trees from the corpus job (atlas_engine.corpus.headvis_tree, .sampling): the numbers
the job keeps pool into HeadVis's metrics as its specification defines them from the dense maps,
the samples carry the model's own sparse maps, every exported tree passes the spec's rules, and
export -> import -> export gives the same tree; a broken tree is refused by file and field with
nothing stored."""

from __future__ import annotations

import json

import numpy as np
import pytest

from app.main import create_app
from atlas_engine.corpus.headvis_tree import (
    TreeError,
    export_tree,
    import_tree,
    read_folder,
    tree_files,
)
from atlas_engine.corpus.job import plan, run_job
from atlas_engine.corpus.store import Store
from atlas_engine.inference.forward import run_forward
from attention_core import headvis
from tests.conftest import make_settings
from tests.support.headvis import assert_valid_tree, write_example_tree

pytestmark = pytest.mark.slow

WORDS = ["red", "blue", "green", "old", "new", "tall", "short", "odd", "even", "warm", "cold"]
PROSE = "\n\n".join(
    f"Text {i}: the {a} cat met the {b} dog, and the {a} cat met the {b} dog again near the "
    f"{a} house where the {b} dog lives."
    for i, (a, b) in enumerate(zip(WORDS, WORDS[3:] + WORDS[:3], strict=True))
)
MODEL = "local/qwen2-tiny"


@pytest.fixture(scope="module")
def finished(local_checkpoints, tmp_path_factory):
    """A finished run of the tiny Qwen 2 over eleven texts, its store and model."""
    tmp = tmp_path_factory.mktemp("headvis")
    app = create_app(make_settings(local_checkpoints, corpus_store=str(tmp / "corpus.sqlite")))
    loaded = app.state.manager.get(MODEL)
    source = tmp / "texts.txt"
    source.write_text(PROSE)
    store = Store(tmp / "corpus.sqlite")
    run = run_job(loaded, store, plan(store, loaded, str(source), 48, limit=20))
    return loaded, store, run, tmp


def maps_of(loaded, store, run):
    """Every text's dense maps (layers · heads, L, L) and token ids, from a fresh pass."""
    texts = store.texts(run, list(range(run.planned)))
    out = []
    for idx in range(run.planned):
        result = run_forward(loaded, texts[idx])
        maps = result.all_maps().flatten(0, 1).numpy().astype(np.float64)
        out.append((maps, result.token_ids))
    return out


def test_the_scatter_pools_every_row_as_the_spec_defines(finished):
    loaded, store, run, _ = finished
    scatter = json.loads(tree_files(store, run)["scatter_data.json"])
    texts = maps_of(loaded, store, run)
    rows = sum(len(ids) for _, ids in texts)
    previous_rows = rows - len(texts)
    for row in scatter:
        n = row["layer"] * run.heads + row["head"]
        self_sum = prev = entropy = dist = dist2 = induction = counted = 0.0
        for maps, ids in texts:
            a = maps[n]
            size = len(ids)
            q, k = np.indices((size, size))
            self_sum += np.trace(a)
            prev += np.trace(a, offset=-1)
            entropy -= (a * np.log(np.maximum(a, 1e-300))).sum()
            dist += (a * np.abs(q - k)).sum()
            dist2 += (a * (q - k) ** 2).sum()
            for qi in range(size):
                copies = [p for p in range(qi) if ids[p] == ids[qi]]
                counted += bool(copies)
                induction += sum(a[qi, p + 1] for p in copies if a[qi, p + 1] >= 0.01)
        mean = dist / rows
        expected = {
            "self_attention_score": self_sum / rows,
            "prev_token_score": prev / previous_rows,
            "pattern_entropy": entropy / rows,
            "qk_distance": mean,
            "qk_distance_variance": dist2 / rows - mean * mean,
            "induction_score": induction / counted,
        }
        for name, value in expected.items():
            assert row[name] == pytest.approx(value, abs=1.5e-4), (row["layer"], row["head"], name)


def test_samples_carry_the_models_sparse_maps_by_interval(finished):
    loaded, store, run, _ = finished
    files = tree_files(store, run)
    config = json.loads(files["config.json"])
    settings = config["pipeline_config"]
    texts = maps_of(loaded, store, run)
    assert settings["warmup_size"] == headvis.warmup_size(run.planned) == 2
    activation = np.array(
        [[m[1:, 1:].max() for m in maps] for maps, _ in texts]
    )  # (texts, layers · heads) HeadVis's max_activation, row and key 0 left out
    edges = headvis.boundaries(activation[:2], settings["n_intervals"])
    kept_any = 0
    for n in range(run.layers * run.heads):
        layer, head = divmod(n, run.heads)
        body = json.loads(files[f"heads/L{layer}H{head}.json"])
        intervals = headvis.route(activation[2:, n : n + 1], edges[n : n + 1])[:, 0]
        by_interval = {i: [2 + t for t in np.nonzero(intervals == i)[0]] for i in range(1, 6)}
        for seq in body["sequences"]:
            idx = seq["sequence_id"]
            maps, ids = texts[idx]
            assert seq["seq_len"] == len(ids) and idx in by_interval[seq["interval"]]
            assert seq["max_activation"] == pytest.approx(activation[idx, n], abs=1e-4)
            dense = maps[n]
            flat = np.asarray(seq["attention_indices"])
            q, k = flat // len(ids), flat % len(ids)
            np.testing.assert_allclose(seq["attention_values"], dense[q, k], atol=6e-5)
            for row in range(len(ids)):  # each row's kept keys are its top weights
                kept = np.sort(dense[row][k[q == row]])
                assert len(kept) <= 8 and (len(kept) == 0 or kept[0] >= 0.005)
                others = np.delete(dense[row], k[q == row])
                if len(kept) == 8:
                    assert others.max(initial=0) <= kept[0] + 1e-7
                else:
                    assert others.max(initial=0) < 0.005
        top = by_interval[5]
        expected_top = sorted(top, key=lambda t: (-activation[t, n], t))[:10]
        got_top = [s["sequence_id"] for s in body["sequences"] if s["interval"] == 5]
        assert got_top == expected_top
        for i in range(1, 5):  # a lower interval keeps its 3 smallest draws
            draws = {t: headvis.priorities(0, np.array([n]), t)[0] for t in by_interval[i]}
            expected = sorted(draws, key=lambda t: (draws[t], t))[:3]
            got = [s["sequence_id"] for s in body["sequences"] if s["interval"] == i]
            assert got == expected
        kept_any += len(body["sequences"])
        assert sum(body["histogram"]["bin_values"]) == run.planned
        assert body["statistics"]["mean_max_activation"] == pytest.approx(
            activation[:, n].mean(), abs=1e-4
        )
    assert kept_any > run.layers * run.heads


def test_a_resumed_or_upgraded_job_keeps_the_same_samples(finished, local_checkpoints, tmp_path):
    loaded, store, run, tmp = finished
    again = Store(tmp_path / "corpus.sqlite")
    planned = plan(again, loaded, str(tmp / "texts.txt"), 48, limit=20)
    calls = []
    run_job(loaded, again, planned, should_stop=lambda: len(calls) >= 4,
            progress=lambda done, planned, rate: calls.append(done))  # fmt: skip
    # a store written before HeadVis's numbers: those rows are described again
    again._db.execute("UPDATE done SET headvis = NULL WHERE idx = 1")
    again._db.execute("UPDATE runs SET headvis = NULL")
    again._db.commit()
    resumed = run_job(loaded, again, plan(again, loaded, str(tmp / "texts.txt"), 48, limit=20))
    assert resumed.done == resumed.planned == run.planned
    assert tree_files(again, resumed).keys() == tree_files(store, run).keys()
    for name, body in tree_files(store, run).items():
        if name != "config.json":
            assert tree_files(again, resumed)[name] == body, name


def test_export_import_export_gives_the_same_tree(finished, tmp_path):
    _, store, run, _ = finished
    first = export_tree(store, run, tmp_path / "first")
    assert_valid_tree(first)
    imported = import_tree(store, read_folder(first))
    assert imported.source == "headvis" and imported.model == MODEL
    second = export_tree(store, imported, tmp_path / "second")
    names = sorted(p.relative_to(first).as_posix() for p in first.rglob("*") if p.is_file())
    assert names == sorted(p.relative_to(second).as_posix() for p in second.rglob("*")
                           if p.is_file())  # fmt: skip
    for name in names:
        assert (first / name).read_bytes() == (second / name).read_bytes(), name
    assert_valid_tree(second)
    again = import_tree(store, read_folder(second))  # importing twice replaces the first
    assert [r.id for r in store.runs() if r.source == "headvis"] == [again.id]


@pytest.mark.parametrize(
    ("name", "change", "message"),
    [
        ("config.json", lambda c: c["pipeline_config"].pop("dtype"), "config.json: dtype"),
        ("config.json", lambda c: c.update(heads=[[0, 0], [0, 0]]), "config.json: heads"),
        ("scatter_data.json", lambda s: s[0].update(layer=99), "scatter_data.json: [0]"),
        ("heads/L0H0.json", lambda h: h["sequences"][0]["attention_values"].pop(),
         "heads/L0H0.json: sequences[0]"),
        ("heads/L0H0.json", lambda h: h["sequences"][0].update(max_activation=None),
         "heads/L0H0.json: sequences[0].max_activation"),
        ("heads/L1H2.json", lambda h: h["sequences"][0]["attention_indices"].__setitem__(0, 10**9),
         "heads/L1H2.json: sequences[0].attention_indices[0]"),
    ],
)  # fmt: skip
def test_a_broken_tree_is_refused_by_file_and_field(finished, tmp_path, name, change, message):
    _, store, run, _ = finished
    files = {k: v.encode() for k, v in tree_files(store, run).items()}
    body = json.loads(files[name])
    change(body)
    files[name] = json.dumps(body).encode()
    runs = [r.id for r in store.runs()]
    with pytest.raises(TreeError, match=message.replace("[", r"\[").replace("]", r"\]")):
        import_tree(store, files)
    assert [r.id for r in store.runs()] == runs  # nothing half-imported


def test_nan_in_a_tree_is_refused(finished):
    _, store, run, _ = finished
    files = {k: v.encode() for k, v in tree_files(store, run).items()}
    files["scatter_data.json"] = b'[{"layer": 0, "head": 0, "pattern_entropy": NaN}]'
    with pytest.raises(TreeError, match=r"scatter_data\.json: NaN is not JSON"):
        import_tree(store, files)


def test_the_specs_own_example_comes_back_byte_for_byte(tmp_path):
    example = write_example_tree(tmp_path / "example")
    store = Store(tmp_path / "corpus.sqlite")
    run = import_tree(store, read_folder(example))
    assert (run.model, run.layers, run.heads, run.planned) == ("example-org/tiny-2x2", 2, 2, 2)
    again = export_tree(store, run, tmp_path / "again")
    for path in example.rglob("*.json"):
        name = path.relative_to(example).as_posix()
        assert (again / name).read_bytes() == path.read_bytes(), name
