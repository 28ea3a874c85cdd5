"""The HeadVis data tree, from its specification alone (`HEADVIS-FORMAT.md`, the shared spec):
a validator of every invariant of its §11, a slow and obvious numpy reference of the numbers of
§7 and §8, and the worked example of §12 written out as a tree.

Nothing here imports the exporter or importer (`atlas_engine.corpus`): these are the independent
side that their tests hold them to.

Maps are one head's dense attention on one sequence, `(q_len, k_len)` numpy arrays with
q_len = k_len = L; token ids are one list of L integers per sequence.
"""

from __future__ import annotations

import json
import math
import random
import re
from datetime import datetime
from itertools import pairwise
from pathlib import Path

import numpy as np

METRICS = (
    "self_attention_score",
    "prev_token_score",
    "pattern_entropy",
    "qk_distance",
    "qk_distance_variance",
    "induction_score",
)
TOP_LEVEL_KEYS = (
    "model_name",
    "np_model_id",
    "dataset_name",
    "heads",
    "n_layers",
    "n_heads",
    "n_intervals",
    "metrics",
    "metric_descriptions",
    "head_data_pattern",
    "has_umap",
    "umap_heads",
    "custom_plots",
    "custom_tables",
    "statistics_display",
    "pipeline_config",
)
CUSTOM_PLOTS = [
    {"key": "qk_distance_histogram", "label": "Q-K distance"},
    {"key": "histogram", "label": "Activation distribution"},
]
CUSTOM_TABLES = [
    {"key": "top_query_tokens", "label": "Top query tokens"},
    {"key": "top_key_tokens", "label": "Top key tokens"},
]
# §6.2: what each pipeline_config key holds. "int" is a JSON integer, "num" any finite number,
# "str?" a string or null. The first group is required by §11.1; the second only typed if present.
PIPELINE_REQUIRED = {
    "model_name": "str",
    "dataset_name": "str",
    "n_sequences": "int",
    "seq_len": "int",
    "dtype": "str",
    "attn_implementation": "str",
    "np_model_id": "str",
    "n_intervals": "int",
    "samples_per_interval": "int",
    "samples_per_top_interval": "int",
    "sparse_topk_per_row": "int",
    "sparse_threshold": "num",
    "induction_attention_threshold": "num",
    "sample_seed": "int",
    "warmup_size": "int",
    "actual_sequences_processed": "int",
    "num_hidden_layers": "int",
    "num_attention_heads": "int",
    "created_at": "str",
}
PIPELINE_OPTIONAL = {
    "dataset_config_name": "str?",
    "dataset_split": "str",
    "dataset_text_field": "str",
    "batch_size": "int",
    "exports_dir": "str",
    "output_run_dir": "str",
    "device": "str",
    "trust_remote_code": "bool",
    "streaming": "bool",
    "delete_model_cache": "bool",
    "min_free_vram_gb": "num",
    "model_cache_dir": "str",
    "revision": "str?",
    "dataset_revision": "str?",
    "attention_layer_indices": "list",
    "causal": "bool",  # §10.5, absent = true
    "writer": "str",  # §10.5
}
TWINS = {  # pipeline_config key -> its top-level twin
    "model_name": "model_name",
    "np_model_id": "np_model_id",
    "dataset_name": "dataset_name",
    "n_intervals": "n_intervals",
    "num_hidden_layers": "n_layers",
    "num_attention_heads": "n_heads",
}
DTYPES = ("auto", "float32", "float16", "bfloat16")
HEAD_BLOCKS = (
    "sequences",
    "qk_distance_histogram",
    "top_query_tokens",
    "top_key_tokens",
    "histogram",
    "statistics",
)
SEQUENCE_KEYS = (
    "sequence_id",
    "interval",
    "tokens",
    "attention_indices",
    "attention_values",
    "seq_len",
    "max_activation",
)
QK_EDGES = [0, 1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096]
ACTIVATION_EDGES = [round(i / 50, 4) for i in range(51)]
HEAD_FILE = re.compile(r"L(\d+)H(\d+)\.json")
TABLE_SIZE = 50

TOL = 1e-4  # §4: two correct implementations may differ by one in the last of 4 decimals
# The writer sums in float32: a sum of many kept weights (a histogram bin, a token's weight) may
# be off by more than 1e-4 once it is in the thousands, so such sums are also allowed this
# fraction of themselves.
SUM_RELATIVE_TOL = 1e-4
# Weights come from bfloat16 maps (§5, about three significant digits): a row's kept weights, or
# one query's induction keys, may sum a little above 1.
BF16_SLACK = 1e-2


# ---------------------------------------------------------------------------------------------
# Reference computations (§7, §8.1, §8.2), float64, one sequence or one run at a time
# ---------------------------------------------------------------------------------------------


def _square_map(A, where: str) -> np.ndarray:
    A = np.asarray(A, dtype=np.float64)
    if A.ndim != 2 or A.shape[0] != A.shape[1] or A.shape[0] < 2:
        raise ValueError(f"{where}: expected an (L, L) map with L >= 2, got shape {A.shape}")
    return A


def reference_metrics(maps, ids, tau: float = 0.01) -> dict[str, float | None]:
    """The six metrics of §7 for one head, pooled over every query row of every sequence.

    maps: one (L, L) map per sequence (L may differ between sequences); ids: one list of L
    token ids per sequence; tau: `induction_attention_threshold` (weights below it count 0).
    Returns {metric name: float64 value, not rounded, or None when its denominator is 0}.
    """
    if len(maps) != len(ids):
        raise ValueError(f"got {len(maps)} maps but {len(ids)} token id lists")
    sums = dict.fromkeys(("self", "prev", "entropy", "distance", "square", "induction"), 0.0)
    rows = prev_rows = induction_rows = 0
    for s, (raw, seq_ids) in enumerate(zip(maps, ids, strict=True)):
        A = _square_map(raw, f"sequence {s}")
        L = A.shape[0]
        if len(seq_ids) != L:
            raise ValueError(f"sequence {s}: map is {L} x {L} but has {len(seq_ids)} token ids")
        q, k = np.indices((L, L))
        distance = np.abs(q - k)
        positive = np.where(A > 0, A, 1.0)  # zero weights add 0 to the entropy
        sums["self"] += float(np.trace(A))
        sums["prev"] += float(np.diagonal(A, offset=-1).sum())
        sums["entropy"] += float(-(A * np.log(positive)).sum())
        sums["distance"] += float((A * distance).sum())
        sums["square"] += float((A * distance**2).sum())
        rows += L
        prev_rows += L - 1
        for query in range(L):
            keys = {p + 1 for p in range(query) if seq_ids[p] == seq_ids[query]}
            if keys:
                induction_rows += 1
                sums["induction"] += sum(float(A[query, j]) for j in keys if A[query, j] >= tau)

    def share(total: float, count: int) -> float | None:
        return total / count if count else None

    mean = share(sums["distance"], rows)
    second = share(sums["square"], rows)
    return {
        "self_attention_score": share(sums["self"], rows),
        "prev_token_score": share(sums["prev"], prev_rows),
        "pattern_entropy": share(sums["entropy"], rows),
        "qk_distance": mean,
        "qk_distance_variance": None if mean is None else second - mean**2,
        "induction_score": share(sums["induction"], induction_rows),
    }


def reference_max_activation(A) -> float:
    """§8.1 step 1: the largest weight of an (L, L) map leaving out row 0 and column 0."""
    A = _square_map(A, "max_activation")
    return float(A[1:, 1:].max())


def reference_coo(A, topk: int, threshold: float) -> tuple[list[int], list[float]]:
    """§8.2: the sparse map of an (L, L) map as (flat indices q * L + k ascending, values).

    Each row keeps its `topk` largest weights (ties to the lower key) that are >= `threshold`;
    values are rounded to 4 decimals (clean doubles, which §4 says read the same as float32s).
    """
    A = _square_map(A, "coo")
    L = A.shape[0]
    kept: list[tuple[int, float]] = []
    for q in range(L):
        order = sorted(range(L), key=lambda k, row=A[q]: (-row[k], k))[:topk]
        kept += [(q * L + k, round(float(A[q, k]), 4)) for k in order if A[q, k] >= threshold]
    kept.sort()
    return [index for index, _ in kept], [value for _, value in kept]


def reference_samples(
    max_activations: list[float],
    *,
    layer: int,
    head: int,
    n_intervals: int,
    samples_per_interval: int,
    samples_per_top_interval: int,
    sample_seed: int,
    warmup_size: int,
) -> list[tuple[int, int]]:
    """§8.1 steps 2-6 for one head: which sequences it samples, as [(sequence_id, interval)] in
    file order. `max_activations[i]` is sequence i's; every COO is taken as non-empty.

    warmup_size 0 is the §12 case: the boundaries come from every sequence and every sequence
    is offered (a run that knows its sequences in advance).
    """
    warm = max_activations if warmup_size == 0 else max_activations[:warmup_size]
    v = sorted(warm)
    W = len(v)
    bounds = [v[min(round(i * W / n_intervals), W - 1)] for i in range(1, n_intervals)] if W else []
    top_capacity = (
        samples_per_top_interval
        if n_intervals > 1
        else max(samples_per_interval, samples_per_top_interval)
    )
    top: list[tuple[float, int]] = []
    lower: dict[int, list[int]] = {i: [] for i in range(1, n_intervals)}
    offers = dict.fromkeys(lower, 0)
    rngs = {
        i: random.Random(sample_seed + 31 * (1000 * layer + 100 * head) + (i - 1)) for i in lower
    }
    for sid in range(warmup_size, len(max_activations)):
        value = max_activations[sid]
        interval = min(n_intervals, 1 + sum(b <= value for b in bounds))
        if interval == n_intervals:
            top = sorted([*top, (value, sid)], key=lambda e: (-e[0], e[1]))[:top_capacity]
            continue
        offers[interval] += 1
        slots = lower[interval]
        if len(slots) < samples_per_interval:
            slots.append(sid)
        else:
            j = rngs[interval].randrange(offers[interval])
            if j < samples_per_interval:
                slots[j] = sid
    picked = [(sid, i) for i in sorted(lower) for sid in lower[i]]
    return picked + [(sid, n_intervals) for _, sid in top]


def _decode(index: int, L: int) -> tuple[int, int]:
    return index // L, index % L


def reference_qk_histogram(sequences: list[dict]) -> list[float]:
    """§8.4: the 13 bin sums (not rounded) of |q - k| over the kept COO entries of `sequences`
    (sequence objects as in a head file)."""
    bins = [0.0] * (len(QK_EDGES) - 1)
    for seq in sequences:
        L = len(seq["tokens"])
        for index, value in zip(seq["attention_indices"], seq["attention_values"], strict=True):
            q, k = _decode(index, L)
            distance = abs(q - k)
            if distance < QK_EDGES[-1]:
                bins[max(i for i, edge in enumerate(QK_EDGES[:-1]) if edge <= distance)] += value
    return bins


def reference_token_tables(sequences: list[dict]) -> tuple[list[tuple], list[tuple]]:
    """§8.5: the (query, key) tables as [(token, summed weight)], highest first, at most 50, the
    string met first ahead on equal sums; weights not rounded."""
    sums: tuple[dict[str, float], dict[str, float]] = ({}, {})
    for seq in sequences:
        tokens = seq["tokens"]
        for index, value in zip(seq["attention_indices"], seq["attention_values"], strict=True):
            q, k = _decode(index, len(tokens))
            for table, position in zip(sums, (q, k), strict=True):
                table[tokens[position]] = table.get(tokens[position], 0.0) + value
    return tuple(  # sorted() is stable: dicts keep the order strings were met
        sorted(table.items(), key=lambda item: -item[1])[:TABLE_SIZE] for table in sums
    )


def activation_bin(value: float) -> int:
    """§8.6: the histogram bin of a max_activation."""
    return min(49, math.floor(50 * value))


# ---------------------------------------------------------------------------------------------
# The worked example of §12
# ---------------------------------------------------------------------------------------------

EXAMPLE_TOKENS = [
    ["<s>", " the", " cat", " sat", " the"],
    ["<s>", " a", " a", " b", " a"],
]
EXAMPLE_IDS = [[1, 5, 6, 7, 5], [1, 8, 8, 9, 8]]
_EXAMPLE_ROWS = {  # §12.1 as printed: head -> per sequence, rows 0 ... 4 listing keys 0 ... q
    (0, 0): (
        "[1] [.75 .25] [.125 .75 .125] [0 .125 .75 .125] [.0625 .125 .1875 .625 0]",
        "[1] [.875 .125] [.0625 .875 .0625] [0 .0625 .875 .0625] [.125 .0625 0 .8125 0]",
    ),
    (0, 1): (
        "[1] [.875 .125] [.75 .125 .125] [.8125 .0625 .125 0] [.625 .125 .0625 .1875 0]",
        "[1] [.9375 .0625] [.875 0 .125] [.875 0 .0625 .0625] [.625 .3125 0 .0625 0]",
    ),
    (1, 0): (
        "[1] [.5 .5] [.5 .25 .25] [.375 .25 .25 .125] [.0625 .125 .6875 .125 0]",
        "[1] [.5 .5] [.3125 .125 .5625] [.375 .3125 .25 .0625] [.125 0 .375 .5 0]",
    ),
    (1, 1): (
        "[1] [.0625 .9375] [.0625 0 .9375] [.125 0 0 .875] [.0625 0 0 .0625 .875]",
        "[1] [.25 .75] [.25 0 .75] [.1875 0 0 .8125] [0 .0625 0 .125 .8125]",
    ),
}


def example_maps() -> dict[tuple[int, int], list[np.ndarray]]:
    """§12.1's maps: (layer, head) -> one (5, 5) causal map per sequence."""
    maps = {}
    for head, sequences in _EXAMPLE_ROWS.items():
        maps[head] = []
        for printed in sequences:
            rows = [[float(w) for w in row.split()] for row in re.findall(r"\[([^\]]*)\]", printed)]
            A = np.zeros((len(rows), len(rows)))  # (q_len, k_len), keys after q are 0
            for q, row in enumerate(rows):
                A[q, : len(row)] = row
            maps[head].append(A)
    return maps


EXAMPLE_CONFIG = {  # §12.3, verbatim
    "model_name": "example-org/tiny-2x2",
    "np_model_id": "tiny-2x2",
    "dataset_name": "example-org/two-texts",
    "heads": [[0, 0], [0, 1], [1, 0], [1, 1]],
    "n_layers": 2,
    "n_heads": 2,
    "n_intervals": 2,
    "metrics": list(METRICS),
    "metric_descriptions": {
        "self_attention_score": "Mean attention from each query position to itself (the "
        "diagonal). Heads near 1 dump nearly all attention onto the current token.",
        "prev_token_score": "Mean attention to the immediately preceding token (first "
        "subdiagonal). High values mark previous-token / shift heads.",
        "pattern_entropy": "Mean Shannon entropy of each row of the attention matrix. High = "
        "dispersed attention; low = highly peaked.",
        "qk_distance": "Mean |q - k| weighted by attention mass. Captures how far back a head "
        "looks on average.",
        "qk_distance_variance": "Variance of |q - k| weighted by attention mass.",
        "induction_score": "Average attention from a query token to the position after a prior "
        "occurrence of the same token. High = induction head.",
    },
    "head_data_pattern": "L{layer}H{head}.json",
    "has_umap": False,
    "umap_heads": [],
    "custom_plots": CUSTOM_PLOTS,
    "custom_tables": CUSTOM_TABLES,
    "statistics_display": {
        "n_samples": {"label": "Samples kept", "format": "default"},
        "mean_max_activation": {"label": "Mean max activation", "format": "default"},
    },
    "pipeline_config": {
        "model_name": "example-org/tiny-2x2",
        "np_model_id": "tiny-2x2",
        "dataset_name": "example-org/two-texts",
        "dataset_config_name": None,
        "dataset_split": "train",
        "dataset_text_field": "text",
        "n_sequences": 2,
        "seq_len": 5,
        "batch_size": 2,
        "exports_dir": "exports",
        "output_run_dir": "exports/tiny-2x2/headvis/example-org-two-texts",
        "device": "cpu",
        "dtype": "float32",
        "attn_implementation": "eager",
        "induction_attention_threshold": 0.01,
        "trust_remote_code": False,
        "min_free_vram_gb": 12.0,
        "streaming": True,
        "model_cache_dir": "hf-cache",
        "delete_model_cache": True,
        "revision": None,
        "dataset_revision": None,
        "n_intervals": 2,
        "samples_per_interval": 1,
        "samples_per_top_interval": 1,
        "sparse_topk_per_row": 3,
        "sparse_threshold": 0.005,
        "sample_seed": 0,
        "warmup_size": 0,
        "created_at": "2026-08-01T00:00:00+00:00",
        "actual_sequences_processed": 2,
        "num_hidden_layers": 2,
        "num_attention_heads": 2,
        "attention_layer_indices": [0, 1],
    },
}


def _rounded(value: float | None) -> float | None:
    return None if value is None or not math.isfinite(value) else round(value, 4)


def example_head_file(layer: int, head: int) -> dict:
    """One head file of §12, computed from its §12.1 maps by §8's rules (warmup_size 0)."""
    pc = EXAMPLE_CONFIG["pipeline_config"]
    maps = example_maps()[layer, head]
    activations = [round(reference_max_activation(A), 4) for A in maps]
    settings = (
        "n_intervals",
        "samples_per_interval",
        "samples_per_top_interval",
        "sample_seed",
        "warmup_size",
    )
    picked = reference_samples(
        activations, layer=layer, head=head, **{key: pc[key] for key in settings}
    )
    sequences = []
    for sid, interval in picked:
        indices, values = reference_coo(
            maps[sid], pc["sparse_topk_per_row"], pc["sparse_threshold"]
        )
        sequences.append(
            {
                "sequence_id": sid,
                "interval": interval,
                "tokens": EXAMPLE_TOKENS[sid],
                "attention_indices": indices,
                "attention_values": values,
                "seq_len": len(EXAMPLE_TOKENS[sid]),
                "max_activation": activations[sid],
            }
        )
    queries, keys = reference_token_tables(sequences)
    counts = [0] * 50
    for value in activations:
        counts[activation_bin(value)] += 1
    return {
        "sequences": sequences,
        "qk_distance_histogram": {
            "bin_edges": QK_EDGES,
            "bin_values": [round(v, 4) for v in reference_qk_histogram(sequences)],
        },
        "top_query_tokens": [{"token": t, "weight": round(w, 4)} for t, w in queries],
        "top_key_tokens": [{"token": t, "weight": round(w, 4)} for t, w in keys],
        "histogram": {"bin_edges": ACTIVATION_EDGES, "bin_values": counts},
        "statistics": {
            "n_samples": len(sequences),
            "mean_max_activation": _rounded(sum(activations) / len(activations)),
        },
    }


def example_scatter() -> list[dict]:
    """§12.4, computed from §12.1's maps."""
    rows = []
    maps = example_maps()
    tau = EXAMPLE_CONFIG["pipeline_config"]["induction_attention_threshold"]
    for layer, head in EXAMPLE_CONFIG["heads"]:
        metrics = reference_metrics(maps[layer, head], EXAMPLE_IDS, tau)
        rows.append({"layer": layer, "head": head} | {m: _rounded(metrics[m]) for m in METRICS})
    return rows


def _dump(path: Path, data, indent: int | None = None) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", encoding="utf-8") as f:
        json.dump(data, f, indent=indent)
        f.write("\n")


def write_example_tree(dst: Path) -> Path:
    """Writes §12's tree into the folder `dst` (made if absent) and returns `dst`.

    The config is §12.3 verbatim; the scatter rows and the four head files are computed from
    §12.1's maps (so §12.4 and §12.5's printed numbers are checked against them, not copied).
    """
    dst = Path(dst)
    _dump(dst / "config.json", EXAMPLE_CONFIG, indent=2)
    _dump(dst / "scatter_data.json", example_scatter())
    _dump(dst / "server_config.json", {})
    _dump(dst / "attributions" / "manifest.json", {})
    for layer, head in EXAMPLE_CONFIG["heads"]:
        _dump(dst / "heads" / f"L{layer}H{head}.json", example_head_file(layer, head))
    return dst


# ---------------------------------------------------------------------------------------------
# The validator (§11, with the encoding rules of §4 and the key sets of §6 and §8)
# ---------------------------------------------------------------------------------------------


class _Missing:
    """A file that could not be read (already reported)."""


MISSING = _Missing()


class _DuplicateKey(ValueError):
    pass


def _no_duplicates(pairs):
    seen = {}
    for key, value in pairs:
        if key in seen:
            raise _DuplicateKey(f"duplicate key {key!r}")
        seen[key] = value
    return seen


def _is_int(x) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def _is_num(x) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def _is_4dp(x: float) -> bool:
    return abs(x - round(x, 4)) <= 1e-9 * max(1.0, abs(x))


def _is_4dp_float32(x: float) -> bool:
    """A 4-decimal value, written clean or as the double nearest its float32 (§4)."""
    return abs(x - round(x, 4)) <= 1e-7


def _kind(x) -> str:
    if isinstance(x, float) and not math.isfinite(x):
        return repr(x)
    return {
        bool: "a boolean",
        int: "an integer",
        float: "a float",
        str: "a string",
        list: "an array",
        dict: "an object",
        type(None): "null",
    }.get(type(x), type(x).__name__)


def _types_ok(x, kind: str) -> bool:
    return {
        "str": lambda: isinstance(x, str),
        "str?": lambda: x is None or isinstance(x, str),
        "int": lambda: _is_int(x),
        "num": lambda: _is_num(x),
        "bool": lambda: isinstance(x, bool),
        "list": lambda: isinstance(x, list),
        "dict": lambda: isinstance(x, dict),
    }[kind]()


_EXPECTED = {
    "str": "a string",
    "str?": "a string or null",
    "int": "an integer (not written as a float)",
    "num": "a finite number",
    "bool": "a boolean",
    "list": "an array",
    "dict": "an object",
}


class _Tree:
    """One pass over a tree; `problems` collects "file: field: what is wrong" lines."""

    def __init__(self, root: Path):
        self.root = Path(root)
        self.problems: list[str] = []
        self.tokens_by_id: dict[int, tuple[str, list]] = {}

    def fail(self, file: str, field: str, message: str) -> None:
        self.problems.append(f"{file}: {field}: {message}" if field else f"{file}: {message}")

    def typed(self, file: str, field: str, value, kind: str) -> bool:
        if _types_ok(value, kind):
            return True
        self.fail(file, field, f"expected {_EXPECTED[kind]}, got {_kind(value)}")
        return False

    # -- reading (§4, §11.11) ------------------------------------------------------------------

    def load(self, rel: str):
        path = self.root / rel
        if not path.is_file():
            self.fail(rel, "", "missing")
            return MISSING
        raw = path.read_bytes()
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as e:
            self.fail(rel, "", f"not UTF-8 ({e})")
            return MISSING
        if not text.isascii():
            self.fail(rel, "", "non-ASCII characters not escaped as \\uXXXX (json.dump defaults)")
        literals: list[str] = []

        def constant(name: str) -> float:
            literals.append(name)
            return float(name.replace("Infinity", "inf"))

        try:
            data = json.loads(text, parse_constant=constant, object_pairs_hook=_no_duplicates)
        except _DuplicateKey as e:
            self.fail(rel, "", str(e))
            return MISSING
        except json.JSONDecodeError as e:
            self.fail(rel, "", f"not JSON ({e})")
            return MISSING
        for field, value in self._non_finite(data, ""):
            self.fail(rel, field or "(top level)", f"non-finite number {value!r} (write null)")
        return data

    def _non_finite(self, data, field: str):
        if isinstance(data, float) and not math.isfinite(data):
            yield field, data
        elif isinstance(data, dict):
            for key, value in data.items():
                yield from self._non_finite(value, f"{field}.{key}" if field else key)
        elif isinstance(data, list):
            for i, value in enumerate(data):
                yield from self._non_finite(value, f"{field}[{i}]")

    # -- config.json (§6, §11.1, §11.2) --------------------------------------------------------

    def check_config(self, config) -> dict | None:
        """Returns the run's settings the other files are checked against, or None."""
        f = "config.json"
        if not self.typed(f, "(top level)", config, "dict"):
            return None
        for key in TOP_LEVEL_KEYS:
            if key not in config:
                self.fail(f, key, "missing")
        top_types = {
            "model_name": "str",
            "np_model_id": "str",
            "dataset_name": "str",
            "heads": "list",
            "n_layers": "int",
            "n_heads": "int",
            "n_intervals": "int",
            "metrics": "list",
            "metric_descriptions": "dict",
            "head_data_pattern": "str",
            "has_umap": "bool",
            "umap_heads": "list",
            "custom_plots": "list",
            "custom_tables": "list",
            "statistics_display": "dict",
            "pipeline_config": "dict",
        }
        ok = {k: k in config and self.typed(f, k, config[k], t) for k, t in top_types.items()}
        if ok["n_intervals"] and config["n_intervals"] < 1:
            self.fail(f, "n_intervals", f"must be >= 1, got {config['n_intervals']}")
        if ok["head_data_pattern"] and config["head_data_pattern"] != "L{layer}H{head}.json":
            self.fail(
                f,
                "head_data_pattern",
                f"must be 'L{{layer}}H{{head}}.json', got {config['head_data_pattern']!r}",
            )
        metrics = list(METRICS)
        if ok["metrics"]:
            metrics = config["metrics"]
            if metrics[:6] != list(METRICS) or not all(isinstance(m, str) for m in metrics):
                self.fail(f, "metrics", f"must start with the six of §7 in order, got {metrics}")
            if len(set(map(str, metrics))) != len(metrics):
                self.fail(f, "metrics", "a name appears twice")
            if ok["metric_descriptions"]:
                for m in metrics:
                    if not isinstance(config["metric_descriptions"].get(m), str):
                        self.fail(f, f"metric_descriptions.{m}", "missing or not a string")
        for key, expected in (("custom_plots", CUSTOM_PLOTS), ("custom_tables", CUSTOM_TABLES)):
            if ok[key]:
                for entry in expected:
                    if entry not in config[key]:
                        self.fail(f, key, f"lacks {entry}")
                for i, entry in enumerate(config[key]):
                    if not (isinstance(entry, dict) and set(entry) == {"key", "label"}):
                        self.fail(f, f"{key}[{i}]", "must be an object {key, label}")
        if ok["statistics_display"]:
            for name in ("n_samples", "mean_max_activation"):
                if name not in config["statistics_display"]:
                    self.fail(f, f"statistics_display.{name}", "missing")
        pc = config.get("pipeline_config") if ok["pipeline_config"] else {}
        run = self.check_pipeline(pc, config)
        run["metrics"] = metrics
        run["blocks"] = [
            e["key"]
            for key in ("custom_plots", "custom_tables")
            if ok[key]
            for e in config[key]
            if isinstance(e, dict) and isinstance(e.get("key"), str)
        ]
        run["statistics"] = list(config["statistics_display"]) if ok["statistics_display"] else []
        run["heads"] = self.check_heads(config, ok, pc) if ok["heads"] else []
        return run

    def check_pipeline(self, pc: dict, config: dict) -> dict:
        f = "config.json"
        run: dict = {}
        for key, kind in PIPELINE_REQUIRED.items():
            if key not in pc:
                self.fail(f, f"pipeline_config.{key}", "missing")
            elif self.typed(f, f"pipeline_config.{key}", pc[key], kind):
                run[key] = pc[key]
        for key, kind in PIPELINE_OPTIONAL.items():
            if key in pc and self.typed(f, f"pipeline_config.{key}", pc[key], kind):
                run[key] = pc[key]
        for key, twin in TWINS.items():
            if key in pc and twin in config and pc[key] != config[twin]:
                self.fail(
                    f,
                    f"pipeline_config.{key}",
                    f"{pc[key]!r} differs from top-level {twin} {config[twin]!r}",
                )
        at_least = {
            "n_intervals": 1,
            "samples_per_interval": 1,
            "samples_per_top_interval": 1,
            "sparse_topk_per_row": 1,
            "seq_len": 2,
            "n_sequences": 0,
            "warmup_size": 0,
            "actual_sequences_processed": 0,
            "num_hidden_layers": 1,
            "num_attention_heads": 1,
            "induction_attention_threshold": 0,
        }
        for key, low in at_least.items():
            if key in run and run[key] < low:
                self.fail(f, f"pipeline_config.{key}", f"must be >= {low}, got {run[key]}")
                del run[key]
        if "sparse_threshold" in run and not 0 <= run["sparse_threshold"] < 1:
            self.fail(
                f,
                "pipeline_config.sparse_threshold",
                f"must be in [0, 1), got {run['sparse_threshold']}",
            )
            del run["sparse_threshold"]
        if "dtype" in run and run["dtype"] not in DTYPES:
            self.fail(f, "pipeline_config.dtype", f"must be one of {DTYPES}, got {run['dtype']!r}")
        processed, asked = run.get("actual_sequences_processed"), run.get("n_sequences")
        if processed is not None and asked is not None and processed > asked:
            self.fail(
                f,
                "pipeline_config.actual_sequences_processed",
                f"{processed} exceeds n_sequences {asked}",
            )
        if "created_at" in run:
            try:
                stamp = datetime.fromisoformat(run["created_at"])
            except ValueError:
                stamp = None
            if stamp is None or stamp.tzinfo is None:
                self.fail(
                    f,
                    "pipeline_config.created_at",
                    f"not ISO 8601 with a UTC offset: {run['created_at']!r}",
                )
        layers = run.get("attention_layer_indices")
        if layers is not None and not all(_is_int(x) for x in layers):
            self.fail(f, "pipeline_config.attention_layer_indices", "must hold integers")
            del run["attention_layer_indices"]
        run["causal"] = run.get("causal", True)
        return run

    def check_heads(self, config: dict, ok: dict, pc: dict) -> list[tuple[int, int]]:
        f = "config.json"
        heads: list[tuple[int, int]] = []
        for i, pair in enumerate(config["heads"]):
            if not (isinstance(pair, list) and len(pair) == 2 and all(map(_is_int, pair))):
                self.fail(f, f"heads[{i}]", f"must be a [layer, head] pair of integers, got {pair}")
                continue
            layer, head = pair
            if ok["n_layers"] and not 0 <= layer < config["n_layers"]:
                self.fail(f, f"heads[{i}]", f"layer {layer} outside 0 ... n_layers - 1")
            if ok["n_heads"] and not 0 <= head < config["n_heads"]:
                self.fail(f, f"heads[{i}]", f"head {head} outside 0 ... n_heads - 1")
            if (layer, head) in heads:
                self.fail(f, f"heads[{i}]", f"[{layer}, {head}] listed twice")
            heads.append((layer, head))
        if heads != sorted(heads):
            self.fail(f, "heads", "not layer-major (layers ascending, then heads ascending)")
        layers = sorted({layer for layer, _ in heads})
        if ok["n_heads"]:
            for layer in layers:
                have = {h for lay, h in heads if lay == layer}
                if have != set(range(config["n_heads"])):
                    self.fail(
                        f,
                        "heads",
                        f"layer {layer} lacks heads {sorted(set(range(config['n_heads'])) - have)}",
                    )
        named = pc.get("attention_layer_indices")
        if isinstance(named, list) and sorted(set(named)) != layers:
            self.fail(
                f,
                "pipeline_config.attention_layer_indices",
                f"{named} is not the set of layers in heads {layers}",
            )
        return heads

    # -- scatter_data.json (§7, §11.3) ---------------------------------------------------------

    def check_scatter(self, rows, run: dict) -> None:
        f = "scatter_data.json"
        if not self.typed(f, "(top level)", rows, "list"):
            return
        heads = run["heads"]
        if len(rows) != len(heads):
            self.fail(f, "(top level)", f"{len(rows)} rows for {len(heads)} heads in config.json")
        seq_len = run.get("seq_len")
        processed = run.get("actual_sequences_processed")
        for i, row in enumerate(rows):
            at = f"[{i}]"
            if not self.typed(f, at, row, "dict"):
                continue
            for key in ("layer", "head"):
                if key not in row:
                    self.fail(f, f"{at}.{key}", "missing")
                else:
                    self.typed(f, f"{at}.{key}", row[key], "int")
            if i < len(heads) and (row.get("layer"), row.get("head")) != heads[i]:
                self.fail(
                    f,
                    at,
                    f"is head ({row.get('layer')}, {row.get('head')}) but "
                    f"config.json heads[{i}] is {list(heads[i])}",
                )
            for key in row:
                if key not in ("layer", "head", *run["metrics"]):
                    self.fail(f, f"{at}.{key}", "not a metric listed in config.json metrics")
            values = {}
            for m in run["metrics"]:
                if m not in row:
                    self.fail(f, f"{at}.{m}", "missing")
                    continue
                value = row[m]
                if value is None:
                    if processed and m != "induction_score":
                        self.fail(f, f"{at}.{m}", "null although sequences were processed")
                    continue
                if not self.typed(f, f"{at}.{m}", value, "num"):
                    continue
                if not _is_4dp(value):
                    self.fail(f, f"{at}.{m}", f"{value!r} is not rounded to 4 decimals")
                values[m] = value
            self._check_ranges(f, at, values, seq_len)

    def _check_ranges(self, f: str, at: str, values: dict, seq_len: int | None) -> None:
        bounds = {
            "self_attention_score": 1.0,
            "prev_token_score": 1.0,
            "induction_score": 1.0 + BF16_SLACK,
        }
        if seq_len is not None:
            bounds |= {"pattern_entropy": math.log(seq_len), "qk_distance": seq_len - 1.0}
        for m, high in bounds.items():
            if m in values and not -TOL <= values[m] <= high + TOL:
                self.fail(f, f"{at}.{m}", f"{values[m]} outside [0, {high:.4f}]")
        mu = values.get("qk_distance")
        variance = values.get("qk_distance_variance")
        if variance is not None and mu is not None and seq_len is not None:
            high = mu * (seq_len - 1 - mu)
            if not -TOL <= variance <= high + 2 * TOL:
                self.fail(
                    f,
                    f"{at}.qk_distance_variance",
                    f"{variance} outside [0, mu(seq_len - 1 - mu)] = [0, {high:.4f}]",
                )

    # -- heads/ (§8, §11.4-§11.10) -------------------------------------------------------------

    def check_head_folder(self, run: dict) -> None:
        folder = self.root / "heads"
        if not folder.is_dir():
            self.fail("heads/", "", "missing")
            return
        listed = {f"L{layer}H{head}.json": (layer, head) for layer, head in run["heads"]}
        present = {p.name for p in folder.iterdir() if HEAD_FILE.fullmatch(p.name)}
        for name in sorted(present - set(listed)):
            self.fail(f"heads/{name}", "", "file for a head not listed in config.json heads")
        if not present:
            self.fail("heads/", "", "empty")
        for name in listed:
            data = self.load(f"heads/{name}")
            if data is not MISSING:
                self.check_head_file(f"heads/{name}", data, run)

    def check_head_file(self, f: str, data, run: dict) -> None:
        if not self.typed(f, "(top level)", data, "dict"):
            return
        for block in (*HEAD_BLOCKS, *run["blocks"]):
            if block not in data:
                self.fail(f, block, "missing")
        sequences = []
        if "sequences" in data and self.typed(f, "sequences", data["sequences"], "list"):
            for i, seq in enumerate(data["sequences"]):
                if self.check_sequence(f, f"sequences[{i}]", seq, run):
                    sequences.append((i, seq))
            self.check_intervals(f, sequences, run)
        if "qk_distance_histogram" in data:
            self.check_qk_histogram(f, data["qk_distance_histogram"], [s for _, s in sequences])
        for key, table in zip(
            ("top_query_tokens", "top_key_tokens"),
            reference_token_tables([s for _, s in sequences]),
            strict=True,
        ):
            if key in data:
                self.check_table(f, key, data[key], table)
        counts = None
        if "histogram" in data:
            counts = self.check_activation_histogram(f, data["histogram"], sequences, run)
        if "statistics" in data:
            n_sequences = (
                len(data["sequences"]) if isinstance(data.get("sequences"), list) else None
            )
            self.check_statistics(f, data["statistics"], n_sequences, counts, run)

    def check_sequence(self, f: str, at: str, seq, run: dict) -> bool:
        """§8.2, §8.3, §11.5-§11.7; True when the sequence is whole enough to recompute from."""
        if not self.typed(f, at, seq, "dict"):
            return False
        kinds = {
            "sequence_id": "int",
            "interval": "int",
            "tokens": "list",
            "attention_indices": "list",
            "attention_values": "list",
            "seq_len": "int",
            "max_activation": "num",
        }
        whole = True
        for key, kind in kinds.items():
            if key not in seq:
                self.fail(f, f"{at}.{key}", "missing")
                whole = False
            elif not self.typed(f, f"{at}.{key}", seq[key], kind):
                whole = False
        for key in seq:
            if key not in kinds:
                self.fail(f, f"{at}.{key}", "not a key of a sequence object (§8.3)")
        if not whole:
            return False
        tokens = seq["tokens"]
        if not all(isinstance(t, str) for t in tokens):
            self.fail(f, f"{at}.tokens", "must hold strings only")
            return False
        L = len(tokens)
        if seq["seq_len"] != L:
            self.fail(f, f"{at}.seq_len", f"{seq['seq_len']} but tokens has {L}")
        if L < 2:
            self.fail(f, f"{at}.tokens", f"{L} tokens: a valid sequence has at least 2")
            return False
        if "seq_len" in run and run["seq_len"] < L:
            self.fail(f, f"{at}.seq_len", f"{L} exceeds the run's seq_len {run['seq_len']}")
        sid = seq["sequence_id"]
        if "warmup_size" in run and sid < run["warmup_size"]:
            self.fail(f, f"{at}.sequence_id", f"{sid} is below warmup_size {run['warmup_size']}")
        processed = run.get("actual_sequences_processed")
        if sid < 0 or (processed is not None and sid >= processed):
            self.fail(f, f"{at}.sequence_id", f"{sid} outside 0 ... actual_sequences_processed - 1")
        if sid in self.tokens_by_id:
            other, other_tokens = self.tokens_by_id[sid]
            if other == f:
                self.fail(f, f"{at}.sequence_id", f"{sid} appears twice in this file")
            elif other_tokens != tokens:
                self.fail(f, f"{at}.tokens", f"sequence {sid} has other tokens in {other}")
        else:
            self.tokens_by_id[sid] = (f, tokens)
        n_intervals = run.get("n_intervals")
        if not 1 <= seq["interval"] <= (n_intervals or seq["interval"]):
            self.fail(f, f"{at}.interval", f"{seq['interval']} outside 1 ... {n_intervals}")
        return self.check_coo(f, at, seq, run)

    def check_coo(self, f: str, at: str, seq: dict, run: dict) -> bool:
        indices, values = seq["attention_indices"], seq["attention_values"]
        L = len(seq["tokens"])
        if len(indices) != len(values):
            self.fail(
                f, f"{at}.attention_values", f"{len(values)} values for {len(indices)} indices"
            )
            return False
        whole = True
        for j, index in enumerate(indices):
            if not _is_int(index):
                self.fail(
                    f, f"{at}.attention_indices[{j}]", f"expected an integer, got {_kind(index)}"
                )
                whole = False
            elif not 0 <= index < L * L:
                self.fail(
                    f, f"{at}.attention_indices[{j}]", f"{index} outside 0 ... L² - 1 = {L * L - 1}"
                )
                whole = False
        for j, value in enumerate(values):
            if not _is_num(value):
                self.fail(
                    f, f"{at}.attention_values[{j}]", f"expected a number, got {_kind(value)}"
                )
                whole = False
        if not whole:
            return False
        if any(b <= a for a, b in pairwise(indices)):
            self.fail(f, f"{at}.attention_indices", "not strictly increasing")
        threshold = run.get("sparse_threshold", 0.0)
        for j, value in enumerate(values):
            if not _is_4dp_float32(value):
                self.fail(f, f"{at}.attention_values[{j}]", f"{value!r} is not a 4-decimal value")
            if not threshold - 5e-5 - 1e-9 <= round(value, 4) <= 1:
                self.fail(
                    f,
                    f"{at}.attention_values[{j}]",
                    f"{value} outside [sparse_threshold {threshold}, 1]",
                )
        rows: dict[int, list[tuple[int, float]]] = {}
        for index, value in zip(indices, values, strict=True):
            q, k = _decode(index, L)
            rows.setdefault(q, []).append((k, value))
            if run["causal"] and k > q and value != 0:
                self.fail(
                    f, f"{at}.attention_indices", f"entry ({q}, {k}) has k > q in a causal tree"
                )
        topk = run.get("sparse_topk_per_row")
        for q, entries in sorted(rows.items()):
            if topk is not None and len(entries) > topk:
                self.fail(
                    f,
                    f"{at}.attention_indices",
                    f"row {q} keeps {len(entries)} entries, more than top {topk}",
                )
            total = sum(v for _, v in entries)
            if total > 1 + BF16_SLACK:
                self.fail(f, f"{at}.attention_values", f"row {q} sums to {total:.4f} > 1")
        if run["causal"]:
            row0 = [(k, v) for k, v in rows.get(0, []) if v != 0]
            if len(row0) != 1 or row0[0][0] != 0 or abs(row0[0][1] - 1) > TOL:
                self.fail(
                    f,
                    f"{at}.attention_indices",
                    f"causal row 0 must hold exactly (0, 0) = 1.0, holds {row0}",
                )
        self.check_max_activation(f, at, seq, rows, run)
        return True

    def check_max_activation(self, f: str, at: str, seq: dict, rows: dict, run: dict) -> None:
        """§8.3 and §11.7: max_activation against the COO off row 0 and column 0."""
        m = seq["max_activation"]
        if not 0 <= m <= 1:
            self.fail(f, f"{at}.max_activation", f"{m} outside [0, 1]")
        if not _is_4dp(m):
            self.fail(f, f"{at}.max_activation", f"{m!r} is not rounded to 4 decimals")
        off = [v for q, entries in rows.items() if q > 0 for k, v in entries if k > 0]
        largest = max(off, default=None)
        if largest is not None and largest > m + TOL:
            self.fail(
                f,
                f"{at}.max_activation",
                f"{m} is below the COO value {round(largest, 4)} off row 0 and column 0",
            )
        threshold, topk = run.get("sparse_threshold"), run.get("sparse_topk_per_row")
        keeps_it = threshold is not None and topk is not None and topk >= 2 and m >= threshold
        if keeps_it and (largest is None or largest < m - TOL):
            self.fail(
                f,
                f"{at}.max_activation",
                f"{m} but the largest COO value off row 0 and column 0 is "
                f"{None if largest is None else round(largest, 4)}",
            )

    def check_intervals(self, f: str, sequences: list[tuple[int, dict]], run: dict) -> None:
        """§8.1 steps 5-6, §11.8."""
        n = run.get("n_intervals")
        per, top = run.get("samples_per_interval"), run.get("samples_per_top_interval")
        for (_, a), (j, b) in pairwise(sequences):
            if b["interval"] < a["interval"]:
                self.fail(
                    f,
                    f"sequences[{j}].interval",
                    f"{b['interval']} after interval {a['interval']}: intervals must ascend",
                )
        by_interval: dict[int, list[tuple[int, float]]] = {}
        for i, seq in sequences:
            by_interval.setdefault(seq["interval"], []).append((i, seq["max_activation"]))
        if n is not None and per is not None and top is not None:
            for interval, members in by_interval.items():
                capacity = (max(per, top) if n == 1 else top) if interval == n else per
                if len(members) > capacity:
                    self.fail(
                        f,
                        "sequences",
                        f"interval {interval} holds {len(members)} "
                        f"sequences, more than its capacity {capacity}",
                    )
        order = sorted(by_interval)
        for low, high in pairwise(order):
            low_max = max(v for _, v in by_interval[low])
            i, high_min = min(by_interval[high], key=lambda e: e[1])
            if low_max > high_min + TOL:
                self.fail(
                    f,
                    f"sequences[{i}].max_activation",
                    f"{high_min} in interval {high} is below {low_max} in interval {low}",
                )
        top_members = by_interval.get(n, [])
        for (_, a), (j, b) in pairwise(top_members):
            if b > a:
                self.fail(
                    f,
                    f"sequences[{j}].max_activation",
                    f"the top interval is not sorted highest first ({a} then {b})",
                )

    def check_qk_histogram(self, f: str, block, sequences: list[dict]) -> None:
        """§8.4, §11.9."""
        key = "qk_distance_histogram"
        if not self._histogram_shape(f, key, block, len(QK_EDGES) - 1, integer_counts=False):
            return
        edges = block["bin_edges"]
        if edges != QK_EDGES or not all(map(_is_int, edges)):
            self.fail(f, f"{key}.bin_edges", f"must be the 14 integers {QK_EDGES}, got {edges}")
        for i, (got, want) in enumerate(
            zip(block["bin_values"], reference_qk_histogram(sequences), strict=True)
        ):
            if not _is_4dp(got):
                self.fail(f, f"{key}.bin_values[{i}]", f"{got!r} is not rounded to 4 decimals")
            if abs(got - want) > TOL + SUM_RELATIVE_TOL * abs(want):
                self.fail(
                    f,
                    f"{key}.bin_values[{i}]",
                    f"{got} but the file's sequences give {round(want, 4)}",
                )

    def _histogram_shape(self, f, key, block, n_bins: int, *, integer_counts: bool) -> bool:
        if not self.typed(f, key, block, "dict"):
            return False
        whole = True
        for part in ("bin_edges", "bin_values"):
            if part not in block:
                self.fail(f, f"{key}.{part}", "missing")
                whole = False
            elif not self.typed(f, f"{key}.{part}", block[part], "list"):
                whole = False
        for part in block:
            if part not in ("bin_edges", "bin_values"):
                self.fail(f, f"{key}.{part}", "not a key of a histogram")
        if not whole:
            return False
        values = block["bin_values"]
        if len(values) != n_bins:
            self.fail(f, f"{key}.bin_values", f"{len(values)} bins, expected {n_bins}")
            return False
        if len(block["bin_edges"]) != n_bins + 1:
            self.fail(
                f, f"{key}.bin_edges", f"{len(block['bin_edges'])} edges, expected {n_bins + 1}"
            )
            return False
        kind = "int" if integer_counts else "num"
        return all([self.typed(f, f"{key}.bin_values[{i}]", v, kind) for i, v in enumerate(values)])

    def check_table(self, f: str, key: str, table, expected: list[tuple[str, float]]) -> None:
        """§8.5, §11.9: each rank's weight and each token's weight as recomputed."""
        if not self.typed(f, key, table, "list"):
            return
        sums = dict(expected)
        seen = set()
        for i, entry in enumerate(table):
            at = f"{key}[{i}]"
            if not self.typed(f, at, entry, "dict"):
                continue
            if set(entry) != {"token", "weight"}:
                self.fail(f, at, f"keys must be token and weight, got {sorted(entry)}")
                continue
            token, weight = entry["token"], entry["weight"]
            if not (
                self.typed(f, f"{at}.token", token, "str")
                and self.typed(f, f"{at}.weight", weight, "num")
            ):
                continue
            if not _is_4dp(weight):
                self.fail(f, f"{at}.weight", f"{weight!r} is not rounded to 4 decimals")
            if token in seen:
                self.fail(f, f"{at}.token", f"{token!r} appears twice")
            seen.add(token)
            want = sums.get(token)
            if want is None:
                self.fail(
                    f,
                    f"{at}.token",
                    f"{token!r} is not among the top tokens the file's sequences give",
                )
            elif abs(weight - want) > TOL + SUM_RELATIVE_TOL * want:
                self.fail(
                    f,
                    f"{at}.weight",
                    f"{weight} but the file's sequences give {token!r} {round(want, 4)}",
                )
            elif i < len(expected) and abs(weight - expected[i][1]) > TOL + SUM_RELATIVE_TOL * want:
                self.fail(f, at, f"out of order: rank {i} should weigh {round(expected[i][1], 4)}")
        if len(table) != len(expected):
            self.fail(
                f,
                key,
                f"{len(table)} entries, the file's sequences give {len(expected)} "
                f"(at most {TABLE_SIZE})",
            )

    def check_activation_histogram(self, f, block, sequences, run) -> list[int] | None:
        """§8.6, §11.10; returns the counts when they are well-formed."""
        key = "histogram"
        if not self._histogram_shape(f, key, block, 50, integer_counts=True):
            return None
        edges = block["bin_edges"]
        if not all(_is_num(e) for e in edges) or any(
            abs(e - want) > 1e-9 for e, want in zip(edges, ACTIVATION_EDGES, strict=True)
        ):
            self.fail(f, f"{key}.bin_edges", "must be the 51 numbers 0.0, 0.02, ..., 1.0")
        counts = block["bin_values"]
        for i, c in enumerate(counts):
            if c < 0:
                self.fail(f, f"{key}.bin_values[{i}]", f"negative count {c}")
        processed = run.get("actual_sequences_processed")
        if processed is not None and sum(counts) != processed:
            self.fail(
                f,
                f"{key}.bin_values",
                f"counts sum to {sum(counts)}, not actual_sequences_processed {processed}",
            )
        for i, seq in sequences:
            m = seq["max_activation"]
            if not 0 <= m <= 1:
                continue
            # a value within 1e-4 of an edge may have come from either side of it before rounding
            bins = {activation_bin(max(0.0, m - TOL)), activation_bin(m), activation_bin(m + TOL)}
            if not any(counts[b] > 0 for b in bins):
                self.fail(
                    f,
                    f"{key}.bin_values[{activation_bin(m)}]",
                    f"sequences[{i}] has max_activation {m} but its bin counts nothing",
                )
        return counts

    def check_statistics(self, f, block, n_sequences, counts, run) -> None:
        """§8.7, §11.10."""
        key = "statistics"
        if not self.typed(f, key, block, "dict"):
            return
        for name in ("n_samples", "mean_max_activation", *run["statistics"]):
            if name not in block:
                self.fail(f, f"{key}.{name}", "missing")
        count = block.get("n_samples")
        typed = "n_samples" in block and self.typed(f, f"{key}.n_samples", count, "int")
        if typed and n_sequences is not None and count != n_sequences:
            self.fail(f, f"{key}.n_samples", f"{count} but sequences holds {n_sequences}")
        if "mean_max_activation" not in block:
            return
        mean = block["mean_max_activation"]
        counted = sum(counts) if counts is not None else None
        if mean is None:
            if counted:
                self.fail(f, f"{key}.mean_max_activation", f"null although {counted} were counted")
            return
        if not self.typed(f, f"{key}.mean_max_activation", mean, "num"):
            return
        if not _is_4dp(mean):
            self.fail(f, f"{key}.mean_max_activation", f"{mean!r} is not rounded to 4 decimals")
        if counted == 0:
            self.fail(f, f"{key}.mean_max_activation", f"{mean} although nothing was counted")
        elif counted:
            low = sum(c * ACTIVATION_EDGES[i] for i, c in enumerate(counts)) / counted
            high = sum(c * ACTIVATION_EDGES[i + 1] for i, c in enumerate(counts)) / counted
            if not low - TOL <= mean <= high + TOL:
                self.fail(
                    f,
                    f"{key}.mean_max_activation",
                    f"{mean} outside [{low:.4f}, {high:.4f}], the histogram's bounds",
                )

    # -- the whole tree ------------------------------------------------------------------------

    def check(self) -> list[str]:
        config = self.load("config.json")
        scatter = self.load("scatter_data.json")
        for rel in ("server_config.json", "attributions/manifest.json"):
            other = self.load(rel)
            if other is not MISSING:
                self.typed(rel, "(top level)", other, "dict")
        run = self.check_config(config) if config is not MISSING else None
        if run is None:
            return self.problems
        if scatter is not MISSING:
            self.check_scatter(scatter, run)
        self.check_head_folder(run)
        return self.problems


def validate_tree(path: Path) -> list[str]:
    """Every way the tree at `path` breaks the HeadVis specification (§4, §6, §8, §11), one line
    each as "file: field: what is wrong" (e.g. "heads/L0H1.json: sequences[2].attention_indices:
    not strictly increasing"); [] for a valid tree."""
    return _Tree(path).check()


def assert_valid_tree(path: Path) -> None:
    """Raises AssertionError listing every problem validate_tree finds."""
    problems = validate_tree(path)
    if problems:
        raise AssertionError(
            f"{len(problems)} problem(s) in the HeadVis tree at {path}:\n" + "\n".join(problems)
        )
