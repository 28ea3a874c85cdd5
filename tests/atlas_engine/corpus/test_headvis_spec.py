"""The HeadVis specification's own side (tests/support/headvis.py), written from the spec alone:
the worked example of its §12 is a valid tree whose numbers the numpy reference reproduces from
the §12.1 maps, and the validator names the file and field of every single break of §11 made to
that tree."""

from __future__ import annotations

import json
import math
import shutil

import numpy as np
import pytest

from tests.support.headvis import (
    EXAMPLE_IDS,
    METRICS,
    activation_bin,
    assert_valid_tree,
    example_maps,
    reference_coo,
    reference_max_activation,
    reference_metrics,
    validate_tree,
    write_example_tree,
)

# §12.4 and §12.5 as printed in the specification, kept here verbatim to hold the reference to.
PRINTED_SCATTER = json.loads("""[
  {"layer": 0, "head": 0, "self_attention_score": 0.275, "prev_token_score": 0.7891, "pattern_entropy": 0.498, "qk_distance": 0.875, "qk_distance_variance": 0.5594, "induction_score": 0.3542},
  {"layer": 0, "head": 1, "self_attention_score": 0.25, "prev_token_score": 0.2969, "pattern_entropy": 0.466, "qk_distance": 1.725, "qk_distance_variance": 1.8744, "induction_score": 0.0833},
  {"layer": 1, "head": 0, "self_attention_score": 0.4, "prev_token_score": 0.3125, "pattern_entropy": 0.787, "qk_distance": 1.075, "qk_distance_variance": 1.1569, "induction_score": 0.7083},
  {"layer": 1, "head": 1, "self_attention_score": 0.875, "prev_token_score": 0.0625, "pattern_entropy": 0.3517, "qk_distance": 0.25, "qk_distance_variance": 0.55, "induction_score": 0.2917}
]""")  # noqa: E501
PRINTED_L0H0 = json.loads("""{
  "sequences": [
    {"sequence_id": 0, "interval": 1, "tokens": ["<s>", " the", " cat", " sat", " the"],
     "attention_indices": [0, 5, 6, 10, 11, 12, 16, 17, 18, 21, 22, 23],
     "attention_values": [1.0, 0.75, 0.25, 0.125, 0.75, 0.125, 0.125, 0.75, 0.125, 0.125, 0.1875, 0.625],
     "seq_len": 5, "max_activation": 0.75},
    {"sequence_id": 1, "interval": 2, "tokens": ["<s>", " a", " a", " b", " a"],
     "attention_indices": [0, 5, 6, 10, 11, 12, 16, 17, 18, 20, 21, 23],
     "attention_values": [1.0, 0.875, 0.125, 0.0625, 0.875, 0.0625, 0.0625, 0.875, 0.0625, 0.125, 0.0625, 0.8125],
     "seq_len": 5, "max_activation": 0.875}
  ],
  "qk_distance_histogram": {
    "bin_edges": [0, 1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096],
    "bin_values": [2.75, 6.3125, 0.75, 0.125, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0]
  },
  "top_query_tokens": [
    {"token": " a", "weight": 3.0}, {"token": "<s>", "weight": 2.0},
    {"token": " the", "weight": 1.9375}, {"token": " cat", "weight": 1.0},
    {"token": " sat", "weight": 1.0}, {"token": " b", "weight": 1.0}
  ],
  "top_key_tokens": [
    {"token": "<s>", "weight": 3.9375}, {"token": " a", "weight": 2.0625},
    {"token": " the", "weight": 1.25}, {"token": " cat", "weight": 1.0625},
    {"token": " b", "weight": 0.875}, {"token": " sat", "weight": 0.75}
  ],
  "histogram": {
    "bin_edges": [0.0, 0.02, 0.04, 0.06, 0.08, 0.1, 0.12, 0.14, 0.16, 0.18, 0.2, 0.22, 0.24, 0.26, 0.28, 0.3, 0.32, 0.34, 0.36, 0.38, 0.4, 0.42, 0.44, 0.46, 0.48, 0.5, 0.52, 0.54, 0.56, 0.58, 0.6, 0.62, 0.64, 0.66, 0.68, 0.7, 0.72, 0.74, 0.76, 0.78, 0.8, 0.82, 0.84, 0.86, 0.88, 0.9, 0.92, 0.94, 0.96, 0.98, 1.0],
    "bin_values": [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0]
  },
  "statistics": {"n_samples": 2, "mean_max_activation": 0.8125}
}""")  # noqa: E501
# §12.5's summary of the other three heads: (sequence_id, interval, max_activation) in file order,
# the histogram bins that count, mean_max_activation.
PRINTED_SUMMARY = {
    "L0H1": ([(0, 1, 0.1875), (1, 2, 0.3125)], [9, 15], 0.25),
    "L1H0": ([(1, 1, 0.5625), (0, 2, 0.6875)], [28, 34], 0.625),
    "L1H1": ([(1, 1, 0.8125), (0, 2, 0.9375)], [40, 46], 0.875),
}


@pytest.fixture(scope="module")
def example(tmp_path_factory):
    return write_example_tree(tmp_path_factory.mktemp("headvis") / "example-org-two-texts")


@pytest.fixture
def tree(example, tmp_path):
    """A fresh copy of the example, to break."""
    return shutil.copytree(example, tmp_path / "tree")


def read(tree, rel):
    return json.loads((tree / rel).read_text())


def write(tree, rel, data, **dump):
    (tree / rel).write_text(json.dumps(data, indent=2 if rel == "config.json" else None, **dump))


# -- the example is valid, and its numbers are the spec's -----------------------------------


def test_the_example_tree_is_valid(example):
    assert validate_tree(example) == []
    assert_valid_tree(example)


def test_the_example_is_written_as_json_dump_writes(example):
    config = (example / "config.json").read_text()
    assert config.startswith('{\n  "model_name": ') and config.endswith("}\n")
    for rel in ("scatter_data.json", "heads/L0H0.json", "server_config.json"):
        text = (example / rel).read_text()
        assert text.count("\n") == 1 and text.endswith("\n"), rel
    assert read(example, "server_config.json") == read(example, "attributions/manifest.json") == {}


def test_the_reference_metrics_give_the_printed_scatter_rows(example):
    maps = example_maps()
    for printed, written in zip(PRINTED_SCATTER, read(example, "scatter_data.json"), strict=True):
        head = (printed["layer"], printed["head"])
        computed = reference_metrics(maps[head], EXAMPLE_IDS, tau=0.01)
        assert written == printed
        for metric in METRICS:
            assert computed[metric] == pytest.approx(printed[metric], abs=1e-4), (head, metric)


def test_the_reference_metrics_give_the_worked_numbers_of_l0h0():
    """§12.2, sequence by sequence: the sums the spec prints, then the pooled metrics."""
    one, two = example_maps()[0, 0]
    first = reference_metrics([one], [EXAMPLE_IDS[0]])
    second = reference_metrics([two], [EXAMPLE_IDS[1]])
    for metrics, diagonal, previous, entropy, distance, square in (
        (first, 1.5, 2.875, 3.0744, 4.375, 6.75),
        (second, 1.25, 3.4375, 1.9055, 4.375, 6.5),
    ):
        assert metrics["self_attention_score"] * 5 == pytest.approx(diagonal)
        assert metrics["prev_token_score"] * 4 == pytest.approx(previous)
        assert metrics["pattern_entropy"] * 5 == pytest.approx(entropy, abs=1e-4)
        assert metrics["qk_distance"] * 5 == pytest.approx(distance)
        mean = metrics["qk_distance"]
        assert (metrics["qk_distance_variance"] + mean**2) * 5 == pytest.approx(square)
    assert first["induction_score"] == pytest.approx(0.1875)  # one counted query, (4, 2)
    # queries 2 and 4 count: (2, 2) = .0625; (4, 2) = 0 and (4, 3) = .8125
    assert second["induction_score"] == pytest.approx(0.875 / 2)
    pooled = reference_metrics([one, two], EXAMPLE_IDS)
    assert pooled["prev_token_score"] == 6.3125 / 8
    assert pooled["qk_distance_variance"] == pytest.approx(1.325 - 0.875**2)
    assert pooled["induction_score"] == pytest.approx(1.0625 / 3)
    assert [reference_max_activation(A) for A in (one, two)] == [0.75, 0.875]


def test_the_reference_entropy_is_in_nats_per_row():
    uniform = np.tril(np.ones((4, 4))) / np.arange(1, 5)[:, None]  # row q uniform over q + 1 keys
    got = reference_metrics([uniform], [[1, 2, 3, 4]])["pattern_entropy"]
    assert got == pytest.approx(sum(math.log(q + 1) for q in range(4)) / 4)


def test_the_induction_threshold_zeroes_small_weights_and_no_repeat_is_null():
    A = np.array([[1, 0, 0], [0.5, 0.5, 0], [0.2, 0.795, 0.005]])
    ids = [7, 8, 7]  # query 2 repeats token 7 of position 0: the pair (2, 1)
    assert reference_metrics([A], [ids], tau=0.01)["induction_score"] == pytest.approx(0.795)
    assert reference_metrics([A], [ids], tau=0.9)["induction_score"] == 0
    assert reference_metrics([A], [[1, 2, 3]])["induction_score"] is None


def test_the_reference_coo_keeps_the_top_k_over_the_threshold_rounded():
    A = np.array([[1, 0, 0], [0.123456, 0.876544, 0], [0.004, 0.5, 0.496]])
    assert reference_coo(A, topk=2, threshold=0.005) == (
        [0, 3, 4, 7, 8],
        [1.0, 0.1235, 0.8765, 0.5, 0.496],
    )
    assert reference_coo(A, topk=3, threshold=0.0)[0] == [0, 1, 2, 3, 4, 5, 6, 7, 8]
    assert reference_max_activation(A[:2, :2]) == 0.876544  # L = 2: A[1, 1]


def test_the_reference_refuses_a_map_that_is_not_square():
    with pytest.raises(ValueError, match=r"got shape \(2, 3\)"):
        reference_metrics([np.zeros((2, 3))], [[1, 2]])
    with pytest.raises(ValueError, match="3 token ids"):
        reference_metrics([np.eye(2)], [[1, 2, 3]])


def test_head_l0h0_is_the_printed_file(example):
    assert read(example, "heads/L0H0.json") == PRINTED_L0H0


@pytest.mark.parametrize("name", sorted(PRINTED_SUMMARY))
def test_the_other_heads_match_the_printed_summary(example, name):
    samples, bins, mean = PRINTED_SUMMARY[name]
    data = read(example, f"heads/{name}.json")
    sequences = data["sequences"]
    assert [(s["sequence_id"], s["interval"], s["max_activation"]) for s in sequences] == samples
    counts = data["histogram"]["bin_values"]
    assert [i for i, c in enumerate(counts) if c] == bins
    assert [activation_bin(m) for _, _, m in samples] == bins
    assert data["statistics"] == {"n_samples": 2, "mean_max_activation": mean}


# -- each single break is named by file and field -----------------------------------------------


def edit(rel, change, **dump):
    """A mutation: read `rel`, let `change` edit it in place, write it back."""

    def mutate(tree):
        data = read(tree, rel)
        change(data)
        write(tree, rel, data, **dump)

    return mutate


def remove(rel):
    return lambda tree: (tree / rel).unlink()


def swap_sequences(data):
    data["sequences"].reverse()


MUTATIONS = {
    "a NaN metric": (
        edit("scatter_data.json", lambda d: d[1].update(self_attention_score=float("nan"))),
        "scatter_data.json: [1].self_attention_score: non-finite",
    ),
    "an Infinity max_activation": (
        edit("heads/L0H1.json", lambda d: d["sequences"][0].update(max_activation=math.inf)),
        "heads/L0H1.json: sequences[0].max_activation: non-finite",
    ),
    "a float layer": (
        edit("scatter_data.json", lambda d: d[0].update(layer=0.0)),
        "scatter_data.json: [0].layer: expected an integer",
    ),
    "a float sequence id": (
        edit("heads/L1H0.json", lambda d: d["sequences"][1].update(sequence_id=0.0)),
        "heads/L1H0.json: sequences[1].sequence_id: expected an integer",
    ),
    "indices out of order": (
        edit("heads/L0H1.json", lambda d: d["sequences"][1]["attention_indices"].reverse()),
        "heads/L0H1.json: sequences[1].attention_indices: not strictly increasing",
    ),
    "an index past L squared": (
        edit("heads/L0H0.json", lambda d: d["sequences"][0]["attention_indices"].__setitem__(-1, 25)),
        "heads/L0H0.json: sequences[0].attention_indices[11]: 25 outside",
    ),
    "a value below the threshold": (
        edit("heads/L0H0.json", lambda d: d["sequences"][0]["attention_values"].__setitem__(3, 0.001)),
        "heads/L0H0.json: sequences[0].attention_values[3]: 0.001 outside [sparse_threshold",
    ),
    "a value with 5 decimals": (
        edit("heads/L1H1.json", lambda d: d["sequences"][0]["attention_values"].__setitem__(1, 0.25001)),
        "heads/L1H1.json: sequences[0].attention_values[1]: 0.25001 is not a 4-decimal value",
    ),
    "values and indices of unequal length": (
        edit("heads/L1H0.json", lambda d: d["sequences"][0]["attention_values"].pop()),
        "heads/L1H0.json: sequences[0].attention_values: 11 values for 12 indices",
    ),
    "a missing head file": (remove("heads/L1H1.json"), "heads/L1H1.json: missing"),
    "a missing manifest": (remove("attributions/manifest.json"), "attributions/manifest.json: missing"),
    "a head file no head lists": (
        lambda tree: shutil.copy(tree / "heads/L0H0.json", tree / "heads/L2H0.json"),
        "heads/L2H0.json: file for a head not listed",
    ),
    "intervals out of order": (
        edit("heads/L1H0.json", swap_sequences),
        "heads/L1H0.json: sequences[1].interval: 1 after interval 2",
    ),
    "an interval over its capacity": (
        edit("heads/L0H0.json", lambda d: d["sequences"][0].update(interval=2)),
        "heads/L0H0.json: sequences: interval 2 holds 2 sequences",
    ),
    "an interval past n_intervals": (
        edit("heads/L0H1.json", lambda d: d["sequences"][1].update(interval=3)),
        "heads/L0H1.json: sequences[1].interval: 3 outside 1 ... 2",
    ),
    "a histogram not summing to the sequences": (
        edit("heads/L0H0.json", lambda d: d["histogram"]["bin_values"].__setitem__(0, 1)),
        "heads/L0H0.json: histogram.bin_values: counts sum to 3",
    ),
    "a sampled max_activation in an empty bin": (
        edit("heads/L1H1.json", lambda d: d["sequences"][0].update(max_activation=0.7)),
        "heads/L1H1.json: histogram.bin_values[35]: sequences[0] has max_activation 0.7",
    ),
    "a distance histogram not its sequences'": (
        edit("heads/L0H0.json", lambda d: d["qk_distance_histogram"]["bin_values"].__setitem__(1, 6.0)),
        "heads/L0H0.json: qk_distance_histogram.bin_values[1]: 6.0 but the file's sequences give 6.3125",
    ),
    "a wrong token weight": (
        edit("heads/L1H1.json", lambda d: d["top_key_tokens"][1].update(weight=2.5)),
        "heads/L1H1.json: top_key_tokens[1].weight: 2.5 but the file's sequences give ' a' 2.375",
    ),
    "a token table out of order": (
        edit("heads/L0H1.json", lambda d: d["top_key_tokens"].reverse()),
        "heads/L0H1.json: top_key_tokens[0]: out of order",
    ),
    "a token twice": (
        edit("heads/L0H0.json", lambda d: d["top_query_tokens"][1].update(token=" a")),
        "heads/L0H0.json: top_query_tokens[1].token: ' a' appears twice",
    ),
    "a missing config key": (
        edit("config.json", lambda d: d["pipeline_config"].pop("seq_len")),
        "config.json: pipeline_config.seq_len: missing",
    ),
    "a missing top-level key": (
        edit("config.json", lambda d: d.pop("statistics_display")),
        "config.json: statistics_display: missing",
    ),
    "a twin that disagrees": (
        edit("config.json", lambda d: d["pipeline_config"].update(num_attention_heads=3)),
        "config.json: pipeline_config.num_attention_heads: 3 differs from top-level n_heads 2",
    ),
    "a layer without all its heads": (
        edit("config.json", lambda d: d["heads"].pop()),
        "config.json: heads: layer 1 lacks heads [1]",
    ),
    "attention layers not the heads' layers": (
        edit("config.json", lambda d: d["pipeline_config"].update(attention_layer_indices=[0])),
        "config.json: pipeline_config.attention_layer_indices: [0] is not the set of layers",
    ),
    "a created_at without offset": (
        edit("config.json", lambda d: d["pipeline_config"].update(created_at="2026-08-01T00:00:00")),
        "config.json: pipeline_config.created_at: not ISO 8601 with a UTC offset",
    ),
    "an unescaped non-ASCII character": (
        edit("config.json", lambda d: d["pipeline_config"].update(device="cpü"), ensure_ascii=False),
        "config.json: non-ASCII characters not escaped",
    ),
    "a causal violation": (  # (1, 1) moved to (1, 3): still increasing, but k > q
        edit("heads/L0H0.json", lambda d: d["sequences"][0]["attention_indices"].__setitem__(2, 8)),
        "heads/L0H0.json: sequences[0].attention_indices: entry (1, 3) has k > q in a causal tree",
    ),
    "a causal row 0 that is not (0, 0) = 1": (
        edit("heads/L0H0.json", lambda d: d["sequences"][1]["attention_values"].__setitem__(0, 0.5)),
        "heads/L0H0.json: sequences[1].attention_indices: causal row 0 must hold exactly (0, 0) = 1.0",
    ),
    "a row over top k": (
        edit("config.json", lambda d: d["pipeline_config"].update(sparse_topk_per_row=2)),
        "heads/L1H0.json: sequences[0].attention_indices: row 2 keeps 3 entries, more than top 2",
    ),
    "a null max_activation": (
        edit("heads/L0H0.json", lambda d: d["sequences"][0].update(max_activation=None)),
        "heads/L0H0.json: sequences[0].max_activation: expected a finite number, got null",
    ),
    "a max_activation the COO exceeds": (
        edit("heads/L1H0.json", lambda d: d["sequences"][1].update(max_activation=0.6)),
        "heads/L1H0.json: sequences[1].max_activation: 0.6 is below the COO value 0.6875",
    ),
    "a sequence id past the run": (
        edit("heads/L0H1.json", lambda d: d["sequences"][1].update(sequence_id=2)),
        "heads/L0H1.json: sequences[1].sequence_id: 2 outside 0 ... actual_sequences_processed - 1",
    ),
    "one id with other tokens in another file": (
        edit("heads/L1H1.json", lambda d: d["sequences"][1]["tokens"].__setitem__(2, " dog")),
        "heads/L1H1.json: sequences[1].tokens: sequence 0 has other tokens in heads/L0H0.json",
    ),
    "seq_len not the token count": (
        edit("heads/L0H1.json", lambda d: d["sequences"][0].update(seq_len=4)),
        "heads/L0H1.json: sequences[0].seq_len: 4 but tokens has 5",
    ),
    "a metric with 5 decimals": (
        edit("scatter_data.json", lambda d: d[0].update(pattern_entropy=0.49801)),
        "scatter_data.json: [0].pattern_entropy: 0.49801 is not rounded to 4 decimals",
    ),
    "a metric out of range": (
        edit("scatter_data.json", lambda d: d[2].update(prev_token_score=1.5)),
        "scatter_data.json: [2].prev_token_score: 1.5 outside [0, 1.0000]",
    ),
    "a variance past mu(seq_len - 1 - mu)": (
        edit("scatter_data.json", lambda d: d[3].update(qk_distance_variance=1.0)),
        "scatter_data.json: [3].qk_distance_variance: 1.0 outside",
    ),
    "a null metric other than induction": (
        edit("scatter_data.json", lambda d: d[0].update(qk_distance=None)),
        "scatter_data.json: [0].qk_distance: null although sequences were processed",
    ),
    "a scatter row missing": (
        edit("scatter_data.json", lambda d: d.pop()),
        "scatter_data.json: (top level): 3 rows for 4 heads",
    ),
    "n_samples not the sequences": (
        edit("heads/L1H0.json", lambda d: d["statistics"].update(n_samples=3)),
        "heads/L1H0.json: statistics.n_samples: 3 but sequences holds 2",
    ),
    "a mean outside its histogram": (
        edit("heads/L0H1.json", lambda d: d["statistics"].update(mean_max_activation=0.5)),
        "heads/L0H1.json: statistics.mean_max_activation: 0.5 outside",
    ),
    "a missing block": (
        edit("heads/L1H1.json", lambda d: d.pop("top_query_tokens")),
        "heads/L1H1.json: top_query_tokens: missing",
    ),
}  # fmt: skip


@pytest.mark.parametrize("name", MUTATIONS)
def test_a_single_break_is_named_by_file_and_field(tree, name):
    mutate, expected = MUTATIONS[name]
    mutate(tree)
    problems = validate_tree(tree)
    assert any(p.startswith(expected) for p in problems), "\n".join(problems)
    with pytest.raises(AssertionError, match="problem"):
        assert_valid_tree(tree)


def test_assert_valid_tree_lists_every_problem(tree):
    MUTATIONS["a float layer"][0](tree)
    MUTATIONS["a missing head file"][0](tree)
    with pytest.raises(AssertionError) as raised:
        assert_valid_tree(tree)
    assert "scatter_data.json: [0].layer" in str(raised.value)
    assert "heads/L1H1.json: missing" in str(raised.value)


def test_a_tree_marked_not_causal_may_attend_forward(tree):
    """§10.5: with causal false, k > q and a row 0 spread over keys are no break."""
    forward = "k > q in a causal tree"
    row0 = "causal row 0"
    MUTATIONS["a causal violation"][0](tree)
    MUTATIONS["a causal row 0 that is not (0, 0) = 1"][0](tree)
    assert {forward, row0} <= {m for p in validate_tree(tree) for m in (forward, row0) if m in p}
    edit("config.json", lambda d: d["pipeline_config"].update(causal=False))(tree)
    assert not [p for p in validate_tree(tree) if forward in p or row0 in p]


def test_coo_values_written_as_float32_doubles_are_valid(tree):
    """§4: 0.1234 may appear as 0.1234000027179718; that is still a 4-decimal value."""
    data = read(tree, "heads/L0H0.json")
    assert float(np.float32(0.1875)) == 0.1875  # the example's values are exact: use another
    data["sequences"][0]["attention_values"][9:12] = [float(np.float32(0.1234)), 0.1875, 0.625]
    write(tree, "heads/L0H0.json", data)
    problems = validate_tree(tree)
    assert not [p for p in problems if "not a 4-decimal value" in p]
    assert any(
        "qk_distance_histogram.bin_values[2]" in p for p in problems
    )  # (4, 1): .125 -> .1234
