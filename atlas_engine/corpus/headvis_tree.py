"""HeadVis data trees in and out of the corpus store.

A tree (the folder HeadVis's viewer loads and Neuronpedia publishes per model) holds
config.json, scatter_data.json (six metrics a head), heads/L{layer}H{head}.json (a head's sampled
sequences with sparse maps, a distance histogram, top tokens, a max_activation histogram),
server_config.json and attributions/manifest.json. docs/corpus.md says what each number is.

- export_tree: a run of the store as a tree, from what the job kept (HeadVis's per-text sums
  and each head's samples, atlas_engine.corpus.sampling): no model, no second pass. A run
  imported from a tree is written back as it was read.
- read_tree / import_tree: a tree checked file by file (an error names the file and the field)
  and stored whole in one transaction, so its head pages open without the model.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterator, Mapping
from datetime import datetime, timezone
from pathlib import Path

import numpy as np

from atlas_engine.corpus.sampling import HeadVisSettings
from atlas_engine.corpus.store import Run, Store
from atlas_engine.errors import InvalidInput
from attention_core import headvis

WRITER = "attention-atlas"
HEAD_FILE = re.compile(r"^L(0|[1-9][0-9]*)H(0|[1-9][0-9]*)\.json$")
CUSTOM_PLOTS = [
    {"key": "qk_distance_histogram", "label": "Q-K distance"},
    {"key": "histogram", "label": "Activation distribution"},
]
CUSTOM_TABLES = [
    {"key": "top_query_tokens", "label": "Top query tokens"},
    {"key": "top_key_tokens", "label": "Top key tokens"},
]
STATISTICS_DISPLAY = {
    "n_samples": {"label": "Samples kept", "format": "default"},
    "mean_max_activation": {"label": "Mean max activation", "format": "default"},
}
MAX_TREE_BYTES = 8 << 30  # a 70B model's tree is about 5 GB
MAX_FILE_BYTES = 64 << 20  # a head file is about 1 MB at HeadVis's defaults


class TreeError(InvalidInput):
    """A tree that breaks the format: the message names the file and the field."""


def folder_name(dataset: str) -> str:
    """The tree's folder for a dataset name, as Neuronpedia names it."""
    return re.sub(r"[^A-Za-z0-9._-]+", "-", dataset.replace("/", "-")).strip("-") or "dataset"


def dump(value: object, indent: int | None = None) -> str:
    """A file's text as HeadVis's writer prints it (json.dump's defaults, a trailing newline)."""
    return json.dumps(value, indent=indent, allow_nan=False) + "\n"


# --- a run as HeadVis's numbers ------------------------------------------------------------------


class RunNumbers:
    """What a native run's tree is made of, read from the store once: per-text sums of every
    head, and the texts that count (HeadVis counts a sequence of 2 tokens or more)."""

    def __init__(self, store: Store, run: Run) -> None:
        if run.headvis is None:
            raise InvalidInput(
                f"corpus run {run.id} was made before HeadVis's numbers were kept: run the "
                f"corpus job on {run.model} again (it adds them to the finished texts)"
            )
        self.store, self.run = store, run
        self.settings = HeadVisSettings.of(run)
        idx, tokens, sums, induction_rows = store.headvis_rows(run)
        valid = tokens >= 2
        self.idx, self.tokens = idx[valid], tokens[valid]
        self.sums, self.induction_rows = sums[valid], induction_rows[valid]
        self.sequence_id = {int(i): n for n, i in enumerate(self.idx)}  # rank among valid texts
        self.activation = self.sums[..., headvis.SUMS.index("max_activation")]  # (n, L, H)

    def metrics(self) -> dict[str, np.ndarray]:
        """{metric: (layers, heads)} HeadVis's six, pooled, unrounded (NaN: undefined)."""
        n = self.sums.shape[0]
        flat = self.sums.reshape(n, -1, self.sums.shape[-1]) if n else np.zeros((0, 1, 7))
        found = headvis.pooled_metrics(flat, self.tokens, self.induction_rows)
        shape = (self.run.layers, self.run.heads)
        return {name: values.reshape(shape) for name, values in found.items()}

    def head_file(self, layer: int, head: int) -> dict:
        """heads/L{layer}H{head}.json of this run."""
        kept = self.store.samples(self.run, layer, head)
        kept = [(idx, s) for idx, s in kept if idx in self.sequence_id]
        pieces = self.store.pieces(self.run, [idx for idx, _ in kept])
        sequences = []
        for idx, sample in kept:  # by interval; the top one highest first (rank_key)
            tokens = pieces[idx]
            sequences.append({
                "sequence_id": self.sequence_id[idx],
                "interval": sample.interval,
                "tokens": tokens,
                "attention_indices": [int(i) for i in sample.indices],
                "attention_values": [float(v) for v in sample.values],
                "seq_len": len(tokens),
                "max_activation": round(float(sample.max_activation), 4),
            })  # fmt: skip
        return head_blocks(sequences, self.activation[:, layer, head])

    def config(self, created_at: str | None = None) -> dict:
        run, s = self.run, self.settings
        pipeline = {
            "model_name": run.model,
            "np_model_id": run.model.split("/")[-1].lower(),
            "dataset_name": run.corpus,
            "dataset_config_name": None,
            "dataset_split": "train",
            "dataset_text_field": "text",
            "n_sequences": run.planned,
            "seq_len": run.sequence_tokens,
            "batch_size": 1,
            "exports_dir": "",
            "output_run_dir": "",
            "device": "cpu",
            "dtype": s.dtype,
            "attn_implementation": "eager",
            "induction_attention_threshold": s.induction_attention_threshold,
            "trust_remote_code": False,
            "min_free_vram_gb": 0.0,
            "streaming": False,
            "model_cache_dir": "",
            "delete_model_cache": False,
            "revision": None,
            "dataset_revision": None,
            "n_intervals": s.n_intervals,
            "samples_per_interval": s.samples_per_interval,
            "samples_per_top_interval": s.samples_per_top_interval,
            "sparse_topk_per_row": s.sparse_topk_per_row,
            "sparse_threshold": s.sparse_threshold,
            "sample_seed": s.sample_seed,
            "warmup_size": int((self.idx < s.warmup_size).sum()),
            "created_at": created_at or datetime.now(timezone.utc).isoformat(),
            "actual_sequences_processed": len(self.idx),
            "num_hidden_layers": run.layers,
            "num_attention_heads": run.heads,
            "attention_layer_indices": list(range(run.layers)),
            "causal": s.causal,
            "writer": WRITER,
        }
        return {
            "model_name": run.model,
            "np_model_id": pipeline["np_model_id"],
            "dataset_name": run.corpus,
            "heads": [[layer, head] for layer in range(run.layers) for head in range(run.heads)],
            "n_layers": run.layers,
            "n_heads": run.heads,
            "n_intervals": s.n_intervals,
            "metrics": list(headvis.METRICS),
            "metric_descriptions": dict(headvis.DESCRIPTIONS),
            "head_data_pattern": "L{layer}H{head}.json",
            "has_umap": False,
            "umap_heads": [],
            "custom_plots": CUSTOM_PLOTS,
            "custom_tables": CUSTOM_TABLES,
            "statistics_display": STATISTICS_DISPLAY,
            "pipeline_config": pipeline,
        }

    def scatter(self) -> list[dict]:
        found = self.metrics()
        return [
            {"layer": layer, "head": head,
             **{name: headvis.round4(float(found[name][layer, head])) for name in headvis.METRICS}}
            for layer in range(self.run.layers) for head in range(self.run.heads)
        ]  # fmt: skip


def head_blocks(sequences: list[dict], activation: np.ndarray) -> dict:
    """A head file's six blocks from its sampled sequences and every sequence's max_activation
    (activation (sequences,))."""
    coo = [(s["attention_indices"], s["attention_values"], s["seq_len"]) for s in sequences]
    queries, keys = headvis.token_tables(
        [(s["attention_indices"], s["attention_values"], s["tokens"]) for s in sequences]
    )
    rounded = np.round(activation.astype(np.float64), 4)
    return {
        "sequences": sequences,
        "qk_distance_histogram": {
            "bin_edges": list(headvis.DISTANCE_EDGES),
            "bin_values": [round(v, 4) for v in headvis.distance_histogram(coo)],
        },
        "top_query_tokens": [{"token": t, "weight": round(w, 4)} for t, w in queries],
        "top_key_tokens": [{"token": t, "weight": round(w, 4)} for t, w in keys],
        "histogram": {
            "bin_edges": [
                round(i / headvis.ACTIVATION_BINS, 4) for i in range(headvis.ACTIVATION_BINS + 1)
            ],
            "bin_values": headvis.activation_histogram(rounded),
        },
        "statistics": {
            "n_samples": len(sequences),
            "mean_max_activation": headvis.round4(float(activation.astype(np.float64).mean()))
            if len(activation)
            else None,
        },
    }


# --- writing -------------------------------------------------------------------------------------


def tree_files(store: Store, run: Run) -> dict[str, str]:
    """Every file of the run's tree: relative path -> text."""
    if run.source == "headvis":
        return {name: store.tree_file(run, name) or "" for name in store.tree_names(run)}
    numbers = RunNumbers(store, run)
    files = {
        "config.json": dump(numbers.config(), indent=2),
        "scatter_data.json": dump(numbers.scatter()),
        "server_config.json": dump({}),
        "attributions/manifest.json": dump({}),
    }
    for layer in range(run.layers):
        for head in range(run.heads):
            files[f"heads/L{layer}H{head}.json"] = dump(numbers.head_file(layer, head))
    return files


def export_tree(store: Store, run: Run, folder: Path) -> Path:
    """Write the run's tree into `folder` (made; an existing tree's files are replaced)."""
    files = tree_files(store, run)
    for name, body in files.items():
        path = folder / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(body, encoding="utf-8")
    return folder


# --- reading -------------------------------------------------------------------------------------


def _load(name: str, body: bytes) -> object:
    if len(body) > MAX_FILE_BYTES:
        raise TreeError(f"{name}: {len(body):,} bytes; a tree's file may have {MAX_FILE_BYTES:,}")
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as err:
        raise TreeError(f"{name}: not UTF-8 ({err.reason} at byte {err.start})") from None

    def refuse(constant: str) -> None:
        raise TreeError(f"{name}: {constant} is not JSON (write null for a missing number)")

    try:
        return json.loads(text, parse_constant=refuse)
    except json.JSONDecodeError as err:
        raise TreeError(f"{name}: not JSON ({err.msg}, line {err.lineno})") from None


def _need(name: str, where: str, value: object, kind: type | tuple, what: str) -> object:
    if (isinstance(value, bool) and kind is not bool) or not isinstance(value, kind):
        raise TreeError(f"{name}: {where}: must be {what}; got {json.dumps(value)[:60]}")
    return value


def _number(name: str, where: str, value: object, nullable: bool = True) -> None:
    if value is None and nullable:
        return
    _need(name, where, value, (int, float), "a number" + (" or null" if nullable else ""))
    if not math.isfinite(value):
        raise TreeError(f"{name}: {where}: must be finite")


REQUIRED = {
    # config.json's keys a reader relies on (pipeline_config's win over the top level's)
    "model_name": (str, "a string"),
    "dataset_name": (str, "a string"),
    "n_sequences": (int, "an integer"),
    "seq_len": (int, "an integer"),
    "dtype": (str, "a string"),
    "attn_implementation": (str, "a string"),
}


def check_config(config: object) -> dict:
    name = "config.json"
    _need(name, "the file", config, dict, "an object")
    pipeline = config.get("pipeline_config", {})
    _need(name, "pipeline_config", pipeline, dict, "an object")
    merged = {**config, **pipeline}
    for key, (kind, what) in REQUIRED.items():
        if merged.get(key) is None:
            raise TreeError(f"{name}: {key}: missing (HeadVis's loaders need it)")
        _need(name, key, merged[key], kind, what)
    for key in ("n_layers", "n_heads"):
        _need(name, key, config.get(key), int, "an integer")
        if not 1 <= config[key] <= 4096:
            raise TreeError(f"{name}: {key}: {config[key]} is out of 1..4096")
    heads = _need(name, "heads", config.get("heads"), list, "a list of [layer, head] pairs")
    for n, pair in enumerate(heads):
        where = f"heads[{n}]"
        _need(name, where, pair, list, "a [layer, head] pair")
        if len(pair) != 2 or not all(isinstance(v, int) and not isinstance(v, bool) for v in pair):
            raise TreeError(f"{name}: {where}: must be two integers")
        if not (0 <= pair[0] < config["n_layers"] and 0 <= pair[1] < config["n_heads"]):
            raise TreeError(f"{name}: {where}: {pair} is outside {config['n_layers']} layers × "
                            f"{config['n_heads']} heads")  # fmt: skip
    if len({tuple(p) for p in heads}) != len(heads):
        raise TreeError(f"{name}: heads: a head is listed twice")
    return merged


def check_scatter(rows: object, heads: set[tuple[int, int]]) -> dict[tuple[int, int], dict]:
    name = "scatter_data.json"
    _need(name, "the file", rows, list, "an array of rows")
    found = {}
    for n, row in enumerate(rows):
        _need(name, f"[{n}]", row, dict, "an object")
        for key in ("layer", "head"):
            _need(name, f"[{n}].{key}", row.get(key), int, "an integer")
        head = (row["layer"], row["head"])
        if head not in heads:
            raise TreeError(f"{name}: [{n}]: L{head[0]}H{head[1]} is not in config.json's heads")
        for metric in headvis.METRICS:
            _number(name, f"[{n}].{metric}", row.get(metric))
        found[head] = row
    return found


def check_head(name: str, body: object) -> None:
    _need(name, "the file", body, dict, "an object")
    sequences = _need(name, "sequences", body.get("sequences", []), list, "an array")
    for n, seq in enumerate(sequences):
        where = f"sequences[{n}]"
        _need(name, where, seq, dict, "an object")
        tokens = _need(name, f"{where}.tokens", seq.get("tokens"), list, "a list of strings")
        if not all(isinstance(t, str) for t in tokens):
            raise TreeError(f"{name}: {where}.tokens: must be strings")
        indices = _need(name, f"{where}.attention_indices", seq.get("attention_indices"), list,
                        "a list of integers")  # fmt: skip
        values = _need(name, f"{where}.attention_values", seq.get("attention_values"), list,
                       "a list of numbers")  # fmt: skip
        if len(indices) != len(values):
            raise TreeError(f"{name}: {where}: {len(indices)} attention_indices against "
                            f"{len(values)} attention_values")  # fmt: skip
        size = len(tokens) ** 2
        for i, index in enumerate(indices):
            if isinstance(index, bool) or not isinstance(index, int) or not 0 <= index < size:
                raise TreeError(f"{name}: {where}.attention_indices[{i}]: {index} is not an "
                                f"index of a {len(tokens)} × {len(tokens)} map")  # fmt: skip
        for i, value in enumerate(values):
            _number(name, f"{where}.attention_values[{i}]", value, nullable=False)
        _number(name, f"{where}.max_activation", seq.get("max_activation", 0.0), nullable=False)
        _need(name, f"{where}.interval", seq.get("interval", 0), int, "an integer")
    for key in ("qk_distance_histogram", "histogram"):
        block = body.get(key)
        if block is None:
            continue
        _need(name, key, block, dict, "an object with bin_edges and bin_values")
        for part in ("bin_edges", "bin_values"):
            values = _need(name, f"{key}.{part}", block.get(part), list, "a list of numbers")
            for i, value in enumerate(values):
                _number(name, f"{key}.{part}[{i}]", value, nullable=False)
    for key in ("top_query_tokens", "top_key_tokens"):
        rows = _need(name, key, body.get(key, []), list, "a list of {token, weight}")
        for i, row in enumerate(rows):
            _need(name, f"{key}[{i}]", row, dict, "a {token, weight} object")
            _need(name, f"{key}[{i}].token", row.get("token"), str, "a string")
            _number(name, f"{key}[{i}].weight", row.get("weight"), nullable=False)


def read_tree(files: Mapping[str, bytes]) -> tuple[Run, Iterator[tuple[str, str]]]:
    """A tree's files (relative path -> bytes, read when looked up) checked; -> the run to
    store, and its files as canonical JSON text, each checked as the iterator reaches it (so a
    store taking them in one transaction holds one file at a time, and a bad one rolls all
    back). TreeError names the first file and field that break the format. The caller bounds
    the files' sizes (read_folder, ZipTree)."""
    for needed in ("config.json", "scatter_data.json"):
        if needed not in files:
            raise TreeError(f"{needed}: missing; a HeadVis tree has config.json, "
                            "scatter_data.json and heads/")  # fmt: skip
    config = _load("config.json", files["config.json"])
    merged = check_config(config)
    heads = {tuple(pair) for pair in config["heads"]}
    scatter = _load("scatter_data.json", files["scatter_data.json"])
    check_scatter(scatter, heads)

    def canonical() -> Iterator[tuple[str, str]]:
        yield "config.json", dump(config, indent=2)
        yield "scatter_data.json", dump(scatter)
        found = 0
        for name in sorted(files):
            if name.startswith("heads/") and HEAD_FILE.match(name.removeprefix("heads/")):
                parsed = _load(name, files[name])
                check_head(name, parsed)
                found += 1
                yield name, dump(parsed)
        if heads and not found:
            raise TreeError("heads/: no head file; a tree has one per head of config.json's heads")
        for name in ("server_config.json", "attributions/manifest.json"):
            yield name, dump(_load(name, files[name])) if name in files else dump({})

    pipeline = config.get("pipeline_config", {})
    settings = {
        key: pipeline[key] for key in HeadVisSettings.__dataclass_fields__ if key in pipeline
    }
    settings.setdefault("causal", bool(pipeline.get("causal", True)))
    settings.setdefault("dtype", merged["dtype"])
    processed = pipeline.get("actual_sequences_processed", merged["n_sequences"])
    run = Run(
        id=0, model=merged["model_name"], corpus=f"headvis:{merged['dataset_name']}",
        sequence_tokens=merged["seq_len"], layers=config["n_layers"], heads=config["n_heads"],
        statistics=list(headvis.METRICS), bins=list(headvis.DISTANCE_EDGES),
        planned=processed if isinstance(processed, int) else merged["n_sequences"], done=0,
        headvis=settings, source="headvis",
    )  # fmt: skip
    return run, canonical()


class FolderTree(Mapping):
    """The regular files under a tree's folder by relative path (links not followed), read
    when looked up."""

    def __init__(self, folder: Path) -> None:
        if not (folder / "config.json").is_file():
            raise TreeError(f"{folder}: no config.json; name the folder that holds the tree")
        self._paths, total = {}, 0
        for path in sorted(folder.rglob("*")):
            if path.is_symlink() or not path.is_file():
                continue
            total += path.stat().st_size
            if total > MAX_TREE_BYTES:
                raise TreeError(f"{folder}: more than {MAX_TREE_BYTES:,} bytes")
            self._paths[path.relative_to(folder).as_posix()] = path

    def __getitem__(self, name: str) -> bytes:
        return self._paths[name].read_bytes()

    def __iter__(self) -> Iterator[str]:
        return iter(self._paths)

    def __len__(self) -> int:
        return len(self._paths)


def read_folder(folder: Path) -> FolderTree:
    """A tree's folder as its files (see FolderTree)."""
    return FolderTree(folder)


def import_tree(store: Store, files: Mapping[str, bytes]) -> Run:
    """A checked tree into the store as a run of its own; an earlier import of the same
    (model, dataset, sequence length) is replaced, in the same transaction."""
    run, canonical = read_tree(files)
    return store.import_tree(run, canonical)
