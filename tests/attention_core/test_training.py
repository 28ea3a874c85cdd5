"""The lab's training engine: its data, its scores, its stop, and the known answers of issue 54."""

from __future__ import annotations

import pytest
import torch

from attention_core.training import (
    PHASE_CHANGE_SCORE,
    TrainConfig,
    evaluate,
    induction_scores,
    make_batch,
    previous_token_scores,
    probe_batches,
    reverse_scores,
    train,
    training_cost,
)


@pytest.fixture(autouse=True)
def one_thread():
    """Training runs on one intra-op thread, as on the server's quick lane (2 contended
    threads are 10x slower here); restored after."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.mark.parametrize(
    ("field", "value", "words"),
    [
        ("layers", 4, r"layers must be an integer in \[1, 3\]; got 4"),
        ("heads", 0, "heads must be"),
        ("d_model", 256, "d_model must be"),
        ("d_model", 30, "divisible by heads=4"),
        ("task", "sort", "task must be one of"),
        ("lr", 0.5, "lr must be in"),
        ("steps", 10**6, "steps must be"),
        ("positions", 1, "positions must be true or false"),
    ],
)
def test_a_bad_knob_says_which_and_what_is_allowed(field, value, words):
    with pytest.raises(ValueError, match=words):
        TrainConfig(**{field: value})


def test_induction_sequences_repeat_their_copy_somewhere():
    config = TrainConfig()
    tokens = make_batch(config, 200, torch.Generator().manual_seed(0))
    assert tokens.shape == (200, 24)
    probe, _ = probe_batches(config)
    assert torch.equal(probe[:, :12], probe[:, 12:])  # the probe: the whole half written twice


def test_reverse_sequences_are_a_half_then_its_mirror():
    config = TrainConfig(task="reverse")
    tokens = make_batch(config, 8, torch.Generator().manual_seed(0))
    assert torch.equal(tokens[:, 12:], tokens[:, :12].flip(-1))


def _pattern(t_len: int, key_of_query) -> torch.Tensor:
    """(1, 1, T, T) with all of query i's weight on key_of_query(i) (or on itself if None)."""
    w = torch.zeros(1, 1, t_len, t_len)
    for i in range(t_len):
        j = key_of_query(i)
        w[0, 0, i, i if j is None or j < 0 else j] = 1.0
    return w


def test_each_score_is_one_on_its_own_pattern_and_zero_on_the_others():
    n = 6
    previous = _pattern(2 * n, lambda i: i - 1)
    induction = _pattern(2 * n, lambda i: i - n + 1 if i >= n else None)
    reverse = _pattern(2 * n, lambda i: 2 * n - 2 - i if i >= n - 1 else None)
    assert previous_token_scores(previous).item() == 1.0
    assert induction_scores(induction, n).item() == 1.0
    assert reverse_scores(reverse, n).item() == 1.0
    assert induction_scores(previous, n).item() == 0.0
    assert previous_token_scores(induction).item() == 0.0


def test_returning_false_stops_training_at_that_snapshot():
    seen = []
    run = train(TrainConfig(steps=100), 10, lambda s: seen.append(s.step) or s.step < 20)
    assert seen == [0, 10, 20]
    assert run.stopped and run.steps_done == 20


def test_a_snapshot_has_every_head_and_the_probe_map():
    config = TrainConfig(layers=3, heads=2, d_model=32, half=5, steps=1)
    run = train(config, 1, lambda s: None)
    s = run.last
    assert s.previous_token.shape == s.induction.shape == s.task_score.shape == (3, 2)
    assert s.maps.shape == (3, 2, 10, 10)
    assert torch.allclose(s.maps.sum(-1), torch.ones(3, 2, 10))
    assert training_cost(config, 1).snapshot_bytes == s.nbytes


def test_the_same_seed_gives_the_same_curve_twice():
    def curve(seed):
        out = []
        train(TrainConfig(steps=40, seed=seed), 10, lambda s: out.append((s.loss, s.maps)))
        return out

    first, again, other = curve(3), curve(3), curve(4)
    assert all(a[0] == b[0] and torch.equal(a[1], b[1]) for a, b in zip(first, again, strict=True))
    assert first[-1][0] != other[-1][0]


def test_the_cost_grows_with_the_run():
    small = training_cost(TrainConfig(), 50)
    assert training_cost(TrainConfig(layers=3), 50).seconds > small.seconds
    assert training_cost(TrainConfig(steps=3000), 50).seconds > small.seconds
    assert training_cost(TrainConfig(batch=128, half=32), 50).bytes > small.bytes
    assert 1 < small.seconds < 120 and small.bytes < 50 * 2**20


@pytest.fixture(scope="module")
def two_layers():
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    snapshots = []
    run = train(TrainConfig(), 100, snapshots.append)
    torch.set_num_threads(before)
    return run, snapshots


@pytest.mark.slow
def test_two_layers_form_an_induction_head_in_layer_1(two_layers):
    run, snapshots = two_layers
    assert run.last.induction[1].max() > PHASE_CHANGE_SCORE
    assert run.last.previous_token[0].max() > 0.4  # the head it composes with
    assert any(s.phase_changed for s in snapshots) and not snapshots[0].phase_changed


@pytest.mark.slow
def test_the_second_copy_becomes_cheaper_than_the_first(two_layers):
    run, snapshots = two_layers
    assert run.last.loss_second < 0.5 * run.last.loss_first
    change = next(s for s in snapshots if s.phase_changed)
    before = snapshots[snapshots.index(change) - 2]
    assert change.loss_second < before.loss_second - 0.5  # the cliff comes with the head


@pytest.mark.slow
def test_ablating_the_previous_token_heads_collapses_the_induction_score(two_layers):
    """The default model spreads "my previous token" over its layer-0 heads (scores 0.27 to
    0.58 with the shipped seed): zeroing the strongest costs a quarter of the induction score
    and doubles the second copy's loss; zeroing all of them leaves it at chance."""
    run, _ = two_layers
    task, repeated = probe_batches(run.model.config)
    scores = run.last.previous_token[0]
    strongest = evaluate(run.model, task, repeated, ablate=[(0, int(scores.argmax()))])
    assert strongest.induction[1].max() < 0.8 * run.last.induction[1].max()
    assert strongest.loss_second > 1.5 * run.last.loss_second
    heads = [(0, h) for h in range(len(scores)) if scores[h] > 0.25]
    every = evaluate(run.model, task, repeated, ablate=heads)
    assert every.induction[1].max() < 0.15
    assert every.loss_second > 2.5


@pytest.mark.slow
def test_one_layer_cannot_form_an_induction_head():
    run = train(TrainConfig(layers=1), 500, lambda s: None)
    assert run.last.induction.max() < 0.25  # chance (uniform causal attention) is about 0.06
    assert run.last.loss_second > 2.0  # two layers: below 0.7
    assert not run.last.phase_changed


@pytest.mark.slow
def test_reversal_is_learned_by_position_in_a_few_hundred_steps():
    run = train(TrainConfig(task="reverse", steps=300), 300, lambda s: None)
    assert run.last.task_score.max() > 0.9  # the anti-diagonal
    assert run.last.loss_second < 0.1 < 3.0 < run.last.loss_first
    assert run.last.induction.max() < 0.2  # another circuit: no induction head


@pytest.mark.slow
def test_reversal_without_positions_is_not_learned():
    run = train(TrainConfig(task="reverse", steps=300, positions=False), 300, lambda s: None)
    assert run.last.loss_second > 2.5
    assert run.last.task_score.max() < 0.2
