"""Where services get a text's forward pass: the loaded models, the cache of passes and the
in-flight budget of one process, as one object (`Passes`), and one text's pass, sized and
reserved (`ReservedPass`).

Every service that reads a model's pass receives a `Passes` (the server makes one per process
and hands it to routes through one dependency, app.deps.PassesDep). Sizing comes before work:
`reserve` counts the text's tokens against the model's limit and reserves the pass's bytes
(and the caller's answer, where it says so) in the in-flight budget before the pass is computed
or looked up, so a slow reader never holds more than the budget allows."""

from __future__ import annotations

import itertools
from collections.abc import Callable, Hashable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from atlas_engine.inference.cache import ForwardCache
from atlas_engine.inference.forward import (
    ForwardResult,
    MapsSink,
    Progress,
    count_tokens,
    run_forward,
)
from atlas_engine.inference.inflight import AnswerBudget, Reservation, Reservations
from atlas_engine.models.loader import LoadedModel
from atlas_engine.models.manager import ModelManager
from atlas_engine.schemas.attention import TextRequest
from atlas_engine.serialize import sending_overhead

ShouldStop = Callable[[], bool] | None
_answers = itertools.count()


def answer_key(kind: str) -> tuple[str, int]:
    """A budget key of one answer's own (never shared) reservation."""
    return (kind, next(_answers))


@dataclass(frozen=True)
class ReservedPass:
    """One text's forward pass with what it holds reserved in the in-flight budget:
    `result` (the pass), `cached` (it came from the cache) and `reservation` (the pass's bytes,
    any replayed maps and the caller's answer). Call release() once done with the pass (after
    the last byte of an answer built from it is sent)."""

    result: ForwardResult
    cached: bool
    reservation: Reservations

    def release(self) -> None:
        self.reservation.release()


@dataclass(frozen=True)
class Passes:
    """The process's loaded models (`manager`), its cache of forward passes (`cache`) and its
    in-flight budget (`budget`): what a service needs to read a text's pass."""

    manager: ModelManager
    cache: ForwardCache
    budget: AnswerBudget

    def __post_init__(self) -> None:
        # A cached pass's recorded layer calls hold its model's modules: an unloaded model's
        # memory is given back only once its passes are forgotten.
        self.manager.on_unload(self.cache.clear_model)

    def model(self, model_id: str) -> LoadedModel:
        """The model, loaded here first if it must be (ModelManager.get's errors)."""
        return self.manager.get(model_id)

    def reserve_bytes(self, kind: str, nbytes: int) -> Reservation:
        """`nbytes` of one answer's own working set (never shared), or ServerBusy."""
        return self.budget.reserve(answer_key(kind), nbytes)

    def reserve(
        self,
        loaded: LoadedModel,
        text: str,
        text_pair: str | None,
        should_stop: ShouldStop = None,
        whole_maps: bool = True,
        progress: Progress | None = None,
        keep_maps: MapsSink | None = None,
        answer_bytes: int = 0,
    ) -> ReservedPass:
        """The text's forward pass, its bytes reserved before it is computed or looked up.
        whole_maps: the caller may read every map of the text at once, so the text is held to
        the model's full_map_tokens and, where maps are replayed, their bytes
        (4 · layers · heads · T² for T tokens) are reserved too, for this caller alone; False
        for callers that read a layer or a window at a time.
        progress, keep_maps: as run_forward's, for a pass computed here.
        answer_bytes: what the caller's answer holds besides the pass (for a streamed answer,
        what it computes at a time and the pieces it holds while sent), reserved first."""
        limit = loaded.full_map_tokens if whole_maps else None
        seq = count_tokens(loaded, text, text_pair, limit)
        key: Hashable = (loaded.id, text, text_pair)
        parts: list[Reservation] = []
        try:
            if answer_bytes:
                parts.append(self.reserve_bytes("answer", answer_bytes))
            if whole_maps and loaded.maps_replayed:
                arch = loaded.arch
                maps = 4 * arch.num_layers * arch.num_heads * seq * seq
                parts.append(self.reserve_bytes("maps", maps))
            nbytes = ForwardResult.nbytes_for(loaded.arch, seq, loaded.maps_replayed)
            parts.append(self.budget.reserve(key, nbytes))
            result, cached = self.cache.get_or_compute(
                key,
                lambda: run_forward(loaded, text, text_pair, should_stop, progress, keep_maps),
            )
        except BaseException:
            Reservations(*parts).release()
            raise
        return ReservedPass(result, cached, Reservations(*parts))

    @contextmanager
    def held(
        self,
        loaded: LoadedModel,
        req: TextRequest,
        should_stop: ShouldStop = None,
        whole_maps: bool = True,
    ) -> Iterator[ForwardResult]:
        """`with passes.held(loaded, req) as result:` the request's pass, reserved while the
        block runs (for answers built in full before they are sent); whole_maps as reserve's."""
        held = self.reserve(loaded, req.text, req.text_pair, should_stop, whole_maps)
        try:
            yield held.result
        finally:
            held.release()

    @contextmanager
    def answer(self, nbytes: int) -> Iterator[Reservation]:
        """`with passes.answer(nbytes) as reservation:` an answer's bytes and what sending them
        holds (sending_overhead), reserved before the answer is built; released here if the
        block fails, else by the caller once the answer is sent."""
        reservation = self.reserve_bytes("answer", nbytes + sending_overhead(nbytes))
        try:
            yield reservation
        except BaseException:
            reservation.release()
            raise
