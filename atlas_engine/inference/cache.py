"""A bounded cache of forward passes, in entries and in bytes, computing each key once; and in
the bytes the passes leave free, a memo of recently replayed layers' maps."""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable

from torch import Tensor

from atlas_engine.inference.forward import ForwardResult


class ForwardCache:
    """LRU over (model, text, text_pair). Concurrent misses on one key run one computation.

    Passes come first: the memo of replayed layers only uses bytes the passes leave free, and
    is emptied (oldest first) to make room for a new pass. Together they stay within max_bytes.
    """

    def __init__(self, max_entries: int, max_bytes: int) -> None:
        self.max_entries = max_entries
        self.max_bytes = max_bytes
        self._items: OrderedDict[Hashable, ForwardResult] = OrderedDict()
        self._bytes = 0
        self._layers: OrderedDict[tuple[Hashable, int], Tensor] = OrderedDict()  # memo, LRU
        self._layer_bytes = 0
        self._guard = threading.Lock()
        self._inflight: dict[Hashable, threading.Lock] = {}

    @property
    def nbytes(self) -> int:
        """Bytes held: the passes and the memo of replayed layers."""
        return self._bytes + self._layer_bytes

    def __len__(self) -> int:
        return len(self._items)

    def held(self, key: Hashable) -> ForwardResult | None:
        """The pass under `key` if it is cached now, without counting as a use of it."""
        with self._guard:
            return self._items.get(key)

    def get_or_compute(
        self, key: Hashable, compute: Callable[[], ForwardResult]
    ) -> tuple[ForwardResult, bool]:
        """(result, was_cached)."""
        with self._guard:
            if key in self._items:
                self._items.move_to_end(key)
                return self._items[key], True
            key_lock = self._inflight.setdefault(key, threading.RLock())  # run_beside
        with key_lock:
            with self._guard:
                if key in self._items:  # computed by the request we waited for
                    self._items.move_to_end(key)
                    return self._items[key], True
            try:
                result = compute()
                with self._guard:
                    self._store(key, result)
            finally:
                with self._guard:
                    self._inflight.pop(key, None)
            return result, False

    def _store(self, key: Hashable, result: ForwardResult) -> None:
        size = result.nbytes
        if self.max_entries == 0 or size > self.max_bytes:
            return  # too big to keep: served once, never cached
        self._items[key] = result
        self._bytes += size
        while self._layers and self.nbytes > self.max_bytes:
            self._forget_oldest_layer()
        while len(self._items) > self.max_entries or self._bytes > self.max_bytes:
            _, evicted = self._items.popitem(last=False)
            self._bytes -= evicted.nbytes

    def _forget_oldest_layer(self) -> None:
        _, maps = self._layers.popitem(last=False)
        self._layer_bytes -= maps.nbytes

    def replayed_layer(self, key: Hashable, layer: int) -> Tensor | None:
        """The memo's maps (heads, seq, seq) of one layer of the text under `key`, or None.
        Shared between answers: read them, never change them."""
        with self._guard:
            maps = self._layers.get((key, layer))
            if maps is not None:
                self._layers.move_to_end((key, layer))
            return maps

    def keep_layer(self, key: Hashable, layer: int, maps: Tensor, make_room: bool = True) -> None:
        """Memoise a layer's maps (replayed, or the model's own from its pass) if they fit in
        what the passes leave free, making room by forgetting the oldest layers unless
        make_room is False (a layer nobody has asked for yet); otherwise keep nothing."""
        with self._guard:
            if (key, layer) in self._layers or self._bytes + maps.nbytes > self.max_bytes:
                return
            if not make_room and self.nbytes + maps.nbytes > self.max_bytes:
                return
            while self._layers and self.nbytes + maps.nbytes > self.max_bytes:
                self._forget_oldest_layer()
            self._layers[(key, layer)] = maps
            self._layer_bytes += maps.nbytes

    def clear_model(self, model_id: str) -> None:
        with self._guard:
            for key in [k for k in self._items if k[0] == model_id]:
                self._bytes -= self._items.pop(key).nbytes
            for key in [k for k in self._layers if k[0][0] == model_id]:
                self._layer_bytes -= self._layers.pop(key).nbytes
