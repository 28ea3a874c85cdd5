"""A text's pass, sized and reserved (atlas_engine.services.passes): what it reserves, when, and
that every reservation goes back, on a tiny GPT-2 (maps replayed) and a tiny BERT."""

import pytest

from atlas_engine.errors import InvalidInput, RequestCancelled, ServerBusy
from atlas_engine.inference.cache import ForwardCache
from atlas_engine.inference.forward import ForwardResult, count_tokens
from atlas_engine.inference.inflight import AnswerBudget
from atlas_engine.schemas.attention import TextRequest
from atlas_engine.services.passes import Passes

TEXT = "The cat sat on the mat because it was warm."


@pytest.fixture
def passes(app) -> Passes:
    """A cache and a budget of this test's own, over the suite's loaded models."""
    return Passes(app.state.manager, ForwardCache(8, 2**30), AnswerBudget(2**30, 1.0))


@pytest.mark.parametrize("model", ["local/gpt2-tiny", "local/bert-tiny"])
def test_a_pass_holds_what_it_reserved_until_released_then_comes_from_the_cache(passes, model):
    loaded = passes.model(model)
    seq = count_tokens(loaded, TEXT, None)
    held = passes.reserve(loaded, TEXT, None, whole_maps=False, answer_bytes=1000)
    pass_bytes = ForwardResult.nbytes_for(loaded.arch, seq, loaded.maps_replayed)
    assert held.result.seq_len == seq and held.cached is False
    assert passes.budget.held_bytes == pass_bytes + 1000
    again = passes.reserve(loaded, TEXT, None, whole_maps=False)
    assert again.cached is True and again.result is held.result
    assert passes.budget.held_bytes == pass_bytes + 1000  # one pass, read twice: counted once
    held.release()
    again.release()
    assert passes.budget.held_bytes == 0


def test_whole_maps_reserve_the_replayed_maps_for_the_caller_alone(passes):
    loaded = passes.model("local/gpt2-tiny")
    assert loaded.maps_replayed
    arch, seq = loaded.arch, count_tokens(loaded, TEXT, None)
    with passes.held(loaded, TextRequest(model=loaded.id, text=TEXT)) as result:
        maps = 4 * arch.num_layers * arch.num_heads * seq * seq
        pass_bytes = ForwardResult.nbytes_for(arch, seq, replayed=True)
        assert passes.budget.held_bytes == maps + pass_bytes
        assert result.all_maps().nbytes == maps
    assert passes.budget.held_bytes == 0


def test_a_pass_that_fails_or_is_stopped_gives_back_everything(passes):
    loaded = passes.model("local/gpt2-tiny")
    with pytest.raises(RequestCancelled):
        passes.reserve(loaded, TEXT + " Stopped.", None, should_stop=lambda: True)
    assert passes.budget.held_bytes == 0
    with pytest.raises(RuntimeError), passes.answer(5000):
        assert passes.budget.held_bytes > 5000  # the bytes and what sending them holds
        raise RuntimeError("the answer failed while it was built")
    assert passes.budget.held_bytes == 0


def test_a_pass_is_sized_before_anything_is_reserved_or_run(app):
    passes = Passes(app.state.manager, ForwardCache(8, 2**30), AnswerBudget(1000, 0.1))
    loaded = passes.model("local/bert-tiny")
    with pytest.raises(ServerBusy):  # the pass needs more than the whole budget
        passes.reserve(loaded, TEXT, None)
    assert passes.budget.held_bytes == 0 and passes.cache.held((loaded.id, TEXT, None)) is None
    too_long = "word " * (loaded.full_map_tokens + 10)
    with pytest.raises(InvalidInput):
        passes.reserve(loaded, too_long, None)
    assert passes.budget.held_bytes == 0
