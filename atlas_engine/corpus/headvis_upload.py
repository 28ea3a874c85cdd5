"""A HeadVis tree uploaded as a zip (POST /api/corpus/import): its members read one at a time
with every size checked before it is decompressed, the tree found inside (the folder holding
config.json nearest the top), then imported as a folder is (atlas_engine.corpus.headvis_tree).

Memory held: the zip itself (at most the server's max_import_bytes), the tree's files as they
are checked (at most MAX_UNZIPPED_FACTOR times that in all), nothing written to disk but the
store's transaction. One upload is imported at a time; another meanwhile is a 503."""

from __future__ import annotations

import io
import threading
import zipfile
from collections.abc import Iterator, Mapping
from pathlib import PurePosixPath

from atlas_engine.corpus.headvis_tree import TreeError, import_tree
from atlas_engine.corpus.store import Run, Store
from atlas_engine.errors import ServerBusy

MAX_UNZIPPED_FACTOR = 4
MAX_MEMBERS = 100_000
_one_at_a_time = threading.Lock()


class ZipTree(Mapping):
    """The files of the tree inside a zip, by path relative to the tree, decompressed when read."""

    def __init__(self, data: bytes, max_unzipped: int) -> None:
        try:
            self._zip = zipfile.ZipFile(io.BytesIO(data))
        except (zipfile.BadZipFile, ValueError) as err:
            raise TreeError(f"the upload is not a zip archive ({err})") from None
        members = [m for m in self._zip.infolist() if not m.is_dir()]
        if len(members) > MAX_MEMBERS:
            raise TreeError(
                f"the zip has {len(members):,} files; a tree has at most {MAX_MEMBERS:,}"
            )
        total = sum(m.file_size for m in members)
        if total > max_unzipped:
            raise TreeError(
                f"the zip unpacks to {total:,} bytes; at most {max_unzipped:,} are taken "
                "(use `atlas corpus import DIR` for a larger tree)"
            )
        roots = [PurePosixPath(m.filename).parent for m in members
                 if PurePosixPath(m.filename).name == "config.json"
                 and not m.filename.startswith("__MACOSX/")]  # fmt: skip
        if not roots:
            raise TreeError("config.json: not in the zip; zip the folder that holds the tree")
        root = min(roots, key=lambda path: len(path.parts))
        self._members = {}
        for member in members:
            path = PurePosixPath(member.filename)
            if path.is_absolute() or ".." in path.parts or root not in (path, *path.parents):
                continue
            self._members[path.relative_to(root).as_posix()] = member

    def __getitem__(self, name: str) -> bytes:
        member = self._members[name]
        try:
            with self._zip.open(member) as handle:
                data = handle.read(member.file_size + 1)
        except (zipfile.BadZipFile, OSError, EOFError, NotImplementedError) as err:
            raise TreeError(f"{name}: cannot be read from the zip ({err})") from None
        if len(data) != member.file_size:
            raise TreeError(f"{name}: its size in the zip is wrong")
        return data

    def __iter__(self) -> Iterator[str]:
        return iter(self._members)

    def __len__(self) -> int:
        return len(self._members)


def import_upload(store: Store, data: bytes, max_import_bytes: int) -> Run:
    """An uploaded zip of a HeadVis tree into the store (TreeError names what is wrong)."""
    if not _one_at_a_time.acquire(blocking=False):
        raise ServerBusy("another HeadVis tree is being imported; retry in a few seconds", 5)
    try:
        return import_tree(store, ZipTree(data, MAX_UNZIPPED_FACTOR * max_import_bytes))
    finally:
        _one_at_a_time.release()
