"""The corpus store: one SQLite file (Python's own sqlite3, so nothing to install) that a user
can open with any SQLite tool and that a stopped job resumes from.

Tables:
- runs: one a (model, corpus, sequence length): the model's shape, the statistics' names and
  the distance bins, so a row's blobs can be read without Atlas.
- sequences: every text of a run, in order, as the text the model reads.
- done: one row a finished text, written in the same transaction as its token rows: its
  statistics (float32, layers × heads × statistics, C order) and its distance histogram
  (float32, layers × heads × bins). A text without a row here is computed again on resume.
- head_tokens: per text and head, the few tokens it read most ("to") and the query tokens that
  read most sharply ("from"), with their weights; labels: how each of those tokens is shown.
- HeadVis's numbers (attention_core.headvis), kept beside Atlas's: runs.headvis holds the run's
  sampling settings (JSON); done.headvis each text's sums and max_activation (float32, layers ×
  heads × SUMS), done.induction_rows its count of queries with an earlier copy, done.pieces its
  tokens decoded one id at a time (JSON); samples the sequences each head keeps, with their
  sparse maps (int32 flat indices, float32 values), at most each interval's capacity.
- tree_files: the files of an imported HeadVis tree (runs.source = 'headvis'), as parsed JSON.

Every read the pages make is one indexed query: a head's statistics over all texts, its top
tokens summed over texts (GROUP BY), one text.
"""

from __future__ import annotations

import json
import logging
import sqlite3
import threading
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

import numpy as np

from atlas_engine.errors import StoreUnavailable
from attention_core import headvis

log = logging.getLogger("attention_atlas")

SCHEMA = """
CREATE TABLE IF NOT EXISTS runs (
    id INTEGER PRIMARY KEY,
    model TEXT NOT NULL,
    corpus TEXT NOT NULL,
    sequence_tokens INTEGER NOT NULL,
    layers INTEGER NOT NULL,
    heads INTEGER NOT NULL,
    statistics TEXT NOT NULL,        -- JSON list: the third axis of done.stats
    bins TEXT NOT NULL,              -- JSON list: the left edges of done.hist's bins
    planned INTEGER NOT NULL,        -- texts in `sequences`
    created TEXT NOT NULL DEFAULT (datetime('now')),
    UNIQUE (model, corpus, sequence_tokens)
);
CREATE TABLE IF NOT EXISTS sequences (
    run INTEGER NOT NULL REFERENCES runs(id),
    idx INTEGER NOT NULL,
    text TEXT NOT NULL,
    PRIMARY KEY (run, idx)
);
CREATE TABLE IF NOT EXISTS done (
    run INTEGER NOT NULL REFERENCES runs(id),
    idx INTEGER NOT NULL,
    tokens INTEGER NOT NULL,
    stats BLOB NOT NULL,
    hist BLOB NOT NULL,
    seconds REAL NOT NULL,
    PRIMARY KEY (run, idx)
);
CREATE TABLE IF NOT EXISTS head_tokens (
    run INTEGER NOT NULL,
    idx INTEGER NOT NULL,
    layer INTEGER NOT NULL,
    head INTEGER NOT NULL,
    side TEXT NOT NULL CHECK (side IN ('to', 'from')),
    token_id INTEGER NOT NULL,
    weight REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS head_tokens_by_head ON head_tokens (run, layer, head, side);
CREATE TABLE IF NOT EXISTS labels (
    run INTEGER NOT NULL,
    token_id INTEGER NOT NULL,
    label TEXT NOT NULL,             -- the token as the explorer shows it (␣ for a space)
    PRIMARY KEY (run, token_id)
);
CREATE TABLE IF NOT EXISTS samples (
    run INTEGER NOT NULL,
    layer INTEGER NOT NULL,
    head INTEGER NOT NULL,
    idx INTEGER NOT NULL,
    interval INTEGER NOT NULL,       -- 1 (lowest max_activation) .. the run's n_intervals
    rank_key REAL NOT NULL,          -- kept lowest first: -max_activation at the top, a draw below
    max_activation REAL NOT NULL,
    indices BLOB NOT NULL,           -- int32, q * L + k, increasing
    vals BLOB NOT NULL,              -- float32, 4 decimals
    PRIMARY KEY (run, layer, head, idx)
);
CREATE TABLE IF NOT EXISTS tree_files (
    run INTEGER NOT NULL,
    name TEXT NOT NULL,              -- relative path in the tree: config.json, heads/L0H0.json
    body TEXT NOT NULL,
    PRIMARY KEY (run, name)
);
"""
# Columns added since the first stores: (table, column, declaration). Added on open.
ADDED_COLUMNS = (
    ("runs", "headvis", "TEXT"),
    ("runs", "source", "TEXT NOT NULL DEFAULT 'atlas'"),
    ("done", "headvis", "BLOB"),
    ("done", "induction_rows", "INTEGER"),
    ("done", "pieces", "TEXT"),
)


_set_aside: dict[str, str] = {}  # store path -> what happened to it, for /api/health and pages
_set_aside_lock = threading.Lock()


def open_or_set_aside(path: Path) -> Store:
    """The store at `path`; where its file is not a readable SQLite database (damaged, or not
    SQLite at all), it is moved aside (set_aside) and StoreUnavailable raised."""
    try:
        return Store(path)
    except sqlite3.DatabaseError as err:
        raise set_aside(path, err) from None


def set_aside(path: Path, error: sqlite3.DatabaseError) -> StoreUnavailable:
    """Move an unreadable store (and its WAL files) aside to <name>.corrupt-<UTC time>, so that
    the next job starts a new one; the error to raise, saying where it went. What happened is
    kept for /api/health (set_aside_note)."""
    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    moved = path.with_name(f"{path.name}.corrupt-{stamp}")
    with _set_aside_lock:
        if path.exists():
            path.replace(moved)
            for suffix in ("-wal", "-shm"):
                side = path.with_name(path.name + suffix)
                if side.exists():
                    side.replace(moved.with_name(moved.name + suffix))
            _set_aside[str(path)] = (
                f"the corpus store {path} could not be read ({error}) and was moved aside to "
                f"{moved}; a new one starts empty: run the corpus job again"
            )
            log.error("corpus store: %s", _set_aside[str(path)])
        note = _set_aside.get(str(path), f"the corpus store {path} could not be read ({error})")
    return StoreUnavailable(note)


def set_aside_note(path: str) -> str | None:
    """What happened to the store at `path` since this process started, if it was set aside."""
    with _set_aside_lock:
        return _set_aside.get(str(path))


@contextmanager
def reading(store: Store | None) -> Iterator[Store | None]:
    """Reads of `store`: a damaged database found mid-read is set aside, StoreUnavailable."""
    try:
        yield store
    except sqlite3.DatabaseError as err:
        if store is None:
            raise
        store.close()
        raise set_aside(store.path, err) from None


@dataclass(frozen=True)
class Run:
    id: int
    model: str
    corpus: str
    sequence_tokens: int
    layers: int
    heads: int
    statistics: list[str]
    bins: list[int]
    planned: int
    done: int
    headvis: dict | None = None  # HeadVis's sampling settings (atlas_engine.corpus.sampling)
    source: str = "atlas"  # "atlas": described here; "headvis": an imported tree


@dataclass(frozen=True)
class TextRow:
    """One finished text, as the store keeps it (see the module docstring for each table)."""

    tokens: int
    stats: np.ndarray  # (layers, heads, statistics) float32
    hist: np.ndarray  # (layers, heads, bins) float32
    head_tokens: list[tuple[int, int, str, int, float]]  # (layer, head, side, token_id, weight)
    labels: dict[int, str]  # token_id -> its label, for the tokens in head_tokens
    headvis: np.ndarray  # (layers, heads, len(attention_core.headvis.SUMS)) float32
    induction_rows: int  # queries with an earlier copy of their token (HeadVis's induction)
    pieces: list[str]  # each token decoded alone, as HeadVis writes tokens


@dataclass(frozen=True)
class SampleRow:
    """A sequence a head keeps for HeadVis's samples, with its sparse map."""

    layer: int
    head: int
    interval: int
    rank_key: float  # kept lowest first within (head, interval); ties: lower idx
    max_activation: float
    indices: np.ndarray  # (entries,) int32 flat q * L + k, increasing
    values: np.ndarray  # (entries,) float32


class Store:
    """One SQLite file; each method one transaction. Safe to share between threads (one
    connection, serialised), and several processes may write it (SQLite's own locking)."""

    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        self._db = sqlite3.connect(path, check_same_thread=False, timeout=60)
        self._db.execute("PRAGMA journal_mode=WAL")
        # A commit is atomic either way; NORMAL only lets a power cut lose the last few
        # (their texts are computed again by a resumed job), and spares the job a sync a batch.
        self._db.execute("PRAGMA synchronous=NORMAL")
        self._db.executescript(SCHEMA)
        for table, column, declaration in ADDED_COLUMNS:
            known = {row[1] for row in self._db.execute(f"PRAGMA table_info({table})")}
            if column not in known:
                self._db.execute(f"ALTER TABLE {table} ADD COLUMN {column} {declaration}")
        self._lock = threading.Lock()

    @contextmanager
    def _transaction(self) -> Iterator[sqlite3.Connection]:
        with self._lock, self._db:
            yield self._db

    def close(self) -> None:
        self._db.close()

    # --- writing ----------------------------------------------------------------------------

    def run_for(self, model: str, corpus: str, sequence_tokens: int) -> Run | None:
        with self._transaction() as db:
            row = db.execute(
                "SELECT id FROM runs WHERE model = ? AND corpus = ? AND sequence_tokens = ?",
                (model, corpus, sequence_tokens),
            ).fetchone()
        return self.run(row[0]) if row else None

    def create_run(
        self, model: str, corpus: str, sequence_tokens: int, shape: tuple[int, int],
        statistics: list[str], bins: list[int], texts: list[str], headvis: dict | None = None,
    ) -> Run:  # fmt: skip
        """A new run with its texts, in one transaction (a crash leaves no half-made run)."""
        with self._transaction() as db:
            cursor = db.execute(
                "INSERT INTO runs (model, corpus, sequence_tokens, layers, heads, statistics, "
                "bins, planned, headvis) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (model, corpus, sequence_tokens, *shape, json.dumps(statistics),
                 json.dumps(bins), len(texts), json.dumps(headvis) if headvis else None),
            )  # fmt: skip
            run = cursor.lastrowid
            db.executemany(
                "INSERT INTO sequences (run, idx, text) VALUES (?, ?, ?)",
                [(run, i, text) for i, text in enumerate(texts)],
            )
        return self.run(run)

    def pending(self, run: int) -> list[tuple[int, str]]:
        """(idx, text) of every text of the run not done yet, in order; a text finished before
        the store kept HeadVis's numbers counts as not done (finish replaces its row)."""
        with self._transaction() as db:
            return db.execute(
                "SELECT s.idx, s.text FROM sequences s LEFT JOIN done d "
                "ON d.run = s.run AND d.idx = s.idx WHERE s.run = ? "
                "AND (d.idx IS NULL OR d.headvis IS NULL) ORDER BY s.idx",
                (run,),
            ).fetchall()

    def set_headvis(self, run: int, settings: dict) -> None:
        """Give a run made before HeadVis's numbers were kept its sampling settings."""
        with self._transaction() as db:
            db.execute("UPDATE runs SET headvis = ? WHERE id = ?", (json.dumps(settings), run))

    def finish(
        self, run: int, idx: int, row: TextRow, seconds: float, samples: list[SampleRow],
        capacity: tuple[int, int, int] = (1, 1, 1),
    ) -> None:  # fmt: skip
        """One text's results, all or nothing (finish_many with one text)."""
        self.finish_many(run, [(idx, row, seconds, samples)], capacity)

    def finish_many(
        self,
        run: int,
        texts: list[tuple[int, TextRow, float, list[SampleRow]]],
        capacity: tuple[int, int, int] = (1, 1, 1),
    ) -> None:
        """Texts' results (idx, row, seconds, samples) in one transaction, all or nothing;
        writing a text twice keeps the first, except a row without HeadVis's numbers (an older
        store's), which is replaced. samples: the heads that may keep each text; once all are
        in, each (head, interval) is cut back to its capacity, capacity = (n_intervals,
        samples_per_interval, samples_per_top_interval): the same samples as one text at a time,
        since a cut keeps the lowest rank keys of what it sees."""
        with self._transaction() as db:
            cut = False
            for idx, row, seconds, samples in texts:
                cut |= self._finish_one(db, run, idx, row, seconds, samples)
            if cut:
                intervals, per_interval, per_top = capacity
                db.execute(
                    "DELETE FROM samples WHERE run = ? AND rowid IN (SELECT rowid FROM ("
                    "SELECT rowid, interval, ROW_NUMBER() OVER (PARTITION BY layer, head, "
                    "interval ORDER BY rank_key, idx) AS n FROM samples WHERE run = ?) "
                    "WHERE n > CASE WHEN interval = ? THEN ? ELSE ? END)",
                    (run, run, intervals, per_top, per_interval),
                )

    @staticmethod
    def _finish_one(
        db: sqlite3.Connection, run: int, idx: int, row: TextRow, seconds: float,
        samples: list[SampleRow],
    ) -> bool:  # fmt: skip
        """One text's rows inside finish_many's transaction; whether it added samples."""
        old = db.execute(
            "SELECT headvis IS NULL FROM done WHERE run = ? AND idx = ?", (run, idx)
        ).fetchone()
        if old is not None and not old[0]:
            return False
        if old is not None:
            db.execute("DELETE FROM done WHERE run = ? AND idx = ?", (run, idx))
            db.execute("DELETE FROM head_tokens WHERE run = ? AND idx = ?", (run, idx))
        db.execute(
            "INSERT INTO done (run, idx, tokens, stats, hist, seconds, headvis, "
            "induction_rows, pieces) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (run, idx, row.tokens, row.stats.astype("<f4").tobytes(),
             row.hist.astype("<f4").tobytes(), seconds, row.headvis.astype("<f4").tobytes(),
             row.induction_rows, json.dumps(row.pieces)),
        )  # fmt: skip
        db.executemany(
            "INSERT INTO head_tokens (run, idx, layer, head, side, token_id, weight) "
            "VALUES (?, ?, ?, ?, ?, ?, ?)",
            [(run, idx, *found) for found in row.head_tokens],
        )
        db.executemany(
            "INSERT OR IGNORE INTO labels (run, token_id, label) VALUES (?, ?, ?)",
            [(run, token, label) for token, label in row.labels.items()],
        )
        if samples:
            db.executemany(
                "INSERT OR REPLACE INTO samples (run, layer, head, idx, interval, rank_key, "
                "max_activation, indices, vals) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                [(run, s.layer, s.head, idx, s.interval, s.rank_key, s.max_activation,
                  s.indices.astype("<i4").tobytes(), s.values.astype("<f4").tobytes())
                 for s in samples],
            )  # fmt: skip
        return bool(samples)

    def sample_bounds(self, run: int) -> dict[tuple[int, int, int], tuple[int, float]]:
        """(layer, head, interval) -> (sequences kept, the largest rank_key kept)."""
        with self._transaction() as db:
            rows = db.execute(
                "SELECT layer, head, interval, COUNT(*), MAX(rank_key) FROM samples "
                "WHERE run = ? GROUP BY layer, head, interval",
                (run,),
            ).fetchall()
        return {(a, b, c): (n, key) for a, b, c, n, key in rows}

    def import_tree(self, run: Run, files: Iterable[tuple[str, str]]) -> Run:
        """An imported HeadVis tree as a run of its own: the run's row and every file, in one
        transaction (nothing half-imported); an earlier import of the same (model, corpus,
        sequence length) is replaced."""
        with self._transaction() as db:
            earlier = db.execute(
                "SELECT id FROM runs WHERE model = ? AND corpus = ? AND sequence_tokens = ? "
                "AND source = 'headvis'",
                (run.model, run.corpus, run.sequence_tokens),
            ).fetchone()
            if earlier:
                self._delete(db, earlier[0])
            cursor = db.execute(
                "INSERT INTO runs (model, corpus, sequence_tokens, layers, heads, statistics, "
                "bins, planned, headvis, source) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, 'headvis')",
                (run.model, run.corpus, run.sequence_tokens, run.layers, run.heads,
                 json.dumps(run.statistics), json.dumps(run.bins), run.planned,
                 json.dumps(run.headvis)),
            )  # fmt: skip
            rid = cursor.lastrowid
            db.executemany(
                "INSERT INTO tree_files (run, name, body) VALUES (?, ?, ?)",
                ((rid, name, body) for name, body in files),
            )  # an error while the files are read rolls the whole import back
        return self.run(rid)

    def delete_run(self, run: int) -> None:
        """A run and everything kept for it."""
        with self._transaction() as db:
            self._delete(db, run)

    @staticmethod
    def _delete(db: sqlite3.Connection, run: int) -> None:
        for table in ("sequences", "done", "head_tokens", "labels", "samples", "tree_files"):
            db.execute(f"DELETE FROM {table} WHERE run = ?", (run,))
        db.execute("DELETE FROM runs WHERE id = ?", (run,))

    # --- reading ----------------------------------------------------------------------------

    def runs(self) -> list[Run]:
        with self._transaction() as db:
            ids = [row[0] for row in db.execute("SELECT id FROM runs ORDER BY id")]
        return [self.run(i) for i in ids]

    def run(self, run: int) -> Run:
        with self._transaction() as db:
            row = db.execute(
                "SELECT id, model, corpus, sequence_tokens, layers, heads, statistics, bins, "
                "planned, (SELECT COUNT(*) FROM done WHERE done.run = runs.id AND done.headvis "
                "IS NOT NULL), headvis, source "
                "FROM runs WHERE id = ?",
                (run,),
            ).fetchone()
        rid, model, corpus, tokens, layers, heads, stats, bins, planned, done, hv, source = row
        if source == "headvis":
            done = planned  # an imported tree is finished as it stands
        return Run(rid, model, corpus, tokens, layers, heads, json.loads(stats),
                   json.loads(bins), planned, done, json.loads(hv) if hv else None,
                   source)  # fmt: skip

    def statistics(self, run: Run) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(idx (n,), stats (n, layers, heads, statistics), hist (n, layers, heads, bins)) of
        every finished text."""
        with self._transaction() as db:
            rows = db.execute(
                "SELECT idx, stats, hist FROM done WHERE run = ? ORDER BY idx", (run.id,)
            ).fetchall()
        shape = (run.layers, run.heads)
        idx = np.array([r[0] for r in rows], dtype=np.int64)
        stats = (
            np.stack([np.frombuffer(r[1], "<f4").reshape(*shape, -1) for r in rows])
            if rows
            else np.zeros((0, *shape, len(run.statistics)), np.float32)
        )
        hist = (
            np.stack([np.frombuffer(r[2], "<f4").reshape(*shape, -1) for r in rows])
            if rows
            else np.zeros((0, *shape, len(run.bins)), np.float32)
        )
        return idx, stats, hist

    def top_tokens(
        self, run: Run, layer: int, head: int, side: str, count: int
    ) -> list[tuple[int, float, int]]:
        """(token_id, summed weight, texts it appears in) of a head's tokens, strongest first."""
        with self._transaction() as db:
            return db.execute(
                "SELECT token_id, SUM(weight) AS total, COUNT(DISTINCT idx) FROM head_tokens "
                "WHERE run = ? AND layer = ? AND head = ? AND side = ? "
                "GROUP BY token_id ORDER BY total DESC LIMIT ?",
                (run.id, layer, head, side, count),
            ).fetchall()

    def labels(self, run: Run, tokens: list[int]) -> dict[int, str]:
        if not tokens:
            return {}
        marks = ",".join("?" * len(tokens))
        with self._transaction() as db:
            rows = db.execute(
                f"SELECT token_id, label FROM labels WHERE run = ? AND token_id IN ({marks})",
                (run.id, *tokens),
            ).fetchall()
        return dict(rows)

    def texts(self, run: Run, indices: list[int]) -> dict[int, str]:
        if not indices:
            return {}
        marks = ",".join("?" * len(indices))
        with self._transaction() as db:
            rows = db.execute(
                f"SELECT idx, text FROM sequences WHERE run = ? AND idx IN ({marks})",
                (run.id, *indices),
            ).fetchall()
        return dict(rows)

    def headvis_rows(self, run: Run) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """(idx (n,), tokens (n,), sums (n, layers, heads, SUMS), induction_rows (n,)) of every
        finished text that has HeadVis's numbers, in order."""
        with self._transaction() as db:
            rows = db.execute(
                "SELECT idx, tokens, headvis, induction_rows FROM done "
                "WHERE run = ? AND headvis IS NOT NULL ORDER BY idx",
                (run.id,),
            ).fetchall()
        idx = np.array([r[0] for r in rows], dtype=np.int64)
        tokens = np.array([r[1] for r in rows], dtype=np.int64)
        sums = (
            np.stack([np.frombuffer(r[2], "<f4").reshape(run.layers, run.heads, -1) for r in rows])
            if rows
            else np.zeros((0, run.layers, run.heads, 0), np.float32)
        )
        return idx, tokens, sums, np.array([r[3] for r in rows], dtype=np.int64)

    def max_activations(
        self, run: Run, indices: list[int], layer: int, head: int
    ) -> dict[int, float]:
        """idx -> one head's HeadVis max_activation of each of these texts, as the job kept it
        (float32); texts described before the job kept HeadVis's numbers are left out."""
        if not indices:
            return {}
        marks = ",".join("?" * len(indices))
        with self._transaction() as db:
            rows = db.execute(
                f"SELECT idx, headvis FROM done WHERE run = ? AND headvis IS NOT NULL "
                f"AND idx IN ({marks})",
                (run.id, *indices),
            ).fetchall()
        column = headvis.SUMS.index("max_activation")
        return {
            idx: float(
                np.frombuffer(body, "<f4").reshape(run.layers, run.heads, -1)[layer, head, column]
            )
            for idx, body in rows
        }

    def samples(self, run: Run, layer: int, head: int) -> list[tuple[int, SampleRow]]:
        """(idx, sample) of the sequences one head keeps, by interval then rank."""
        with self._transaction() as db:
            rows = db.execute(
                "SELECT idx, interval, rank_key, max_activation, indices, vals FROM samples "
                "WHERE run = ? AND layer = ? AND head = ? ORDER BY interval, rank_key, idx",
                (run.id, layer, head),
            ).fetchall()
        return [
            (idx, SampleRow(layer, head, interval, key, act, np.frombuffer(ind, "<i4"),
                            np.frombuffer(val, "<f4")))
            for idx, interval, key, act, ind, val in rows
        ]  # fmt: skip

    def pieces(self, run: Run, indices: list[int]) -> dict[int, list[str]]:
        """idx -> the text's tokens decoded one id at a time."""
        if not indices:
            return {}
        marks = ",".join("?" * len(indices))
        with self._transaction() as db:
            rows = db.execute(
                f"SELECT idx, pieces FROM done WHERE run = ? AND idx IN ({marks})",
                (run.id, *indices),
            ).fetchall()
        return {idx: json.loads(body) for idx, body in rows}

    def tree_file(self, run: Run, name: str) -> str | None:
        with self._transaction() as db:
            row = db.execute(
                "SELECT body FROM tree_files WHERE run = ? AND name = ?", (run.id, name)
            ).fetchone()
        return row[0] if row else None

    def tree_names(self, run: Run) -> list[str]:
        with self._transaction() as db:
            return [r[0] for r in db.execute(
                "SELECT name FROM tree_files WHERE run = ? ORDER BY name", (run.id,))]  # fmt: skip
