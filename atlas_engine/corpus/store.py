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

Every read the pages make is one indexed query: a head's statistics over all texts, its top
tokens summed over texts (GROUP BY), one text.
"""

from __future__ import annotations

import json
import logging
import sqlite3
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

import numpy as np

from atlas_engine.errors import StoreUnavailable

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
"""


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


class Store:
    """One SQLite file; each method one transaction. Safe to share between threads (one
    connection, serialised), and several processes may write it (SQLite's own locking)."""

    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        self._db = sqlite3.connect(path, check_same_thread=False, timeout=60)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.executescript(SCHEMA)
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
        statistics: list[str], bins: list[int], texts: list[str],
    ) -> Run:  # fmt: skip
        """A new run with its texts, in one transaction (a crash leaves no half-made run)."""
        with self._transaction() as db:
            cursor = db.execute(
                "INSERT INTO runs (model, corpus, sequence_tokens, layers, heads, statistics, "
                "bins, planned) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                (model, corpus, sequence_tokens, *shape, json.dumps(statistics),
                 json.dumps(bins), len(texts)),
            )  # fmt: skip
            run = cursor.lastrowid
            db.executemany(
                "INSERT INTO sequences (run, idx, text) VALUES (?, ?, ?)",
                [(run, i, text) for i, text in enumerate(texts)],
            )
        return self.run(run)

    def pending(self, run: int) -> list[tuple[int, str]]:
        """(idx, text) of every text of the run not done yet, in order."""
        with self._transaction() as db:
            return db.execute(
                "SELECT s.idx, s.text FROM sequences s LEFT JOIN done d "
                "ON d.run = s.run AND d.idx = s.idx WHERE s.run = ? AND d.idx IS NULL "
                "ORDER BY s.idx",
                (run,),
            ).fetchall()

    def finish(
        self, run: int, idx: int, tokens: int, stats: np.ndarray, hist: np.ndarray,
        seconds: float, head_tokens: list[tuple[int, int, str, int, float]],
        labels: dict[int, str],
    ) -> None:  # fmt: skip
        """One text's results, all or nothing; writing a text twice keeps the first."""
        with self._transaction() as db:
            inserted = db.execute(
                "INSERT OR IGNORE INTO done (run, idx, tokens, stats, hist, seconds) "
                "VALUES (?, ?, ?, ?, ?, ?)",
                (run, idx, tokens, stats.astype("<f4").tobytes(), hist.astype("<f4").tobytes(),
                 seconds),
            ).rowcount  # fmt: skip
            if inserted:
                db.executemany(
                    "INSERT INTO head_tokens (run, idx, layer, head, side, token_id, weight) "
                    "VALUES (?, ?, ?, ?, ?, ?, ?)",
                    [(run, idx, *row) for row in head_tokens],
                )
                db.executemany(
                    "INSERT OR IGNORE INTO labels (run, token_id, label) VALUES (?, ?, ?)",
                    [(run, token, label) for token, label in labels.items()],
                )

    # --- reading ----------------------------------------------------------------------------

    def runs(self) -> list[Run]:
        with self._transaction() as db:
            ids = [row[0] for row in db.execute("SELECT id FROM runs ORDER BY id")]
        return [self.run(i) for i in ids]

    def run(self, run: int) -> Run:
        with self._transaction() as db:
            row = db.execute(
                "SELECT id, model, corpus, sequence_tokens, layers, heads, statistics, bins, "
                "planned, (SELECT COUNT(*) FROM done WHERE done.run = runs.id) "
                "FROM runs WHERE id = ?",
                (run,),
            ).fetchone()
        rid, model, corpus, tokens, layers, heads, stats, bins, planned, done = row
        return Run(rid, model, corpus, tokens, layers, heads, json.loads(stats),
                   json.loads(bins), planned, done)  # fmt: skip

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
