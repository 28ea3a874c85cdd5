"""Issue 50.5-6: models are sized from their files before they load, and held to
ATLAS_MODEL_BYTES with each other, whatever model they are (the live server's RSS:
tests/e2e/test_model_memory.py)."""

import gc
import json
import shutil
import time
import weakref

import pytest

from atlas_engine.config import Settings
from atlas_engine.errors import ModelUnavailable
from atlas_engine.inference.cache import ForwardCache
from atlas_engine.inference.inflight import AnswerBudget
from atlas_engine.models.manager import ModelManager
from atlas_engine.models.placement import CPU_FLOAT32
from atlas_engine.models.registry import GEMMA3_ID, MINILM_ID, SMOLLM2_ID, build_registry
from atlas_engine.models.sizing import model_size
from atlas_engine.models.sources import (
    GGUF_SOURCES,
    checkpoint_folder,
    package_folder,
    tokenizer_file_bytes,
)
from atlas_engine.services.passes import Passes
from tests.conftest import CACHE_DIR

MiB = 2**20


def sized(model_id: str):
    spec = build_registry([], None)[model_id]
    return model_size(spec, CACHE_DIR, CPU_FLOAT32)


@pytest.mark.parametrize("model_id", [SMOLLM2_ID, GEMMA3_ID])
def test_a_gguf_checkpoints_pinned_size_is_its_converted_copys(model_id):
    """An unconverted GGUF is sized from pins (it has no config.json yet): they must be what its
    converted copy, counted from its config.json, holds."""
    spec = build_registry([], None)[model_id]
    checkpoint = GGUF_SOURCES[spec.source]
    folder = checkpoint_folder(spec, CACHE_DIR)
    if folder is None:
        if package_folder(checkpoint.parts[0][0]) is None:
            pytest.skip(f"{checkpoint.label} is not installed")
        pytest.fail(f"{checkpoint.label} is not converted in {CACHE_DIR}: ask for it once")
    assert sized(model_id).parameters == checkpoint.parameters
    # Within a few bytes: tokenizer_config.json records how it was loaded ("local_files_only":
    # true or false), which differs between a conversion here and one on a fresh clone.
    assert abs(tokenizer_file_bytes(folder) - checkpoint.tokenizer_bytes) <= 16
    assert checkpoint.conversion_bytes > sized(model_id).resident


def test_the_default_model_bytes_holds_the_two_largest_built_in_models():
    """max_loaded_models is 2 by default: any two built-in models installed here fit at once,
    and SmolLM2's conversion fits (Gemma's is made by `make gemma`)."""
    budget = Settings().model_bytes
    sizes = {m: sized(m).resident for m in (MINILM_ID, SMOLLM2_ID, GEMMA3_ID) if _installed(m)}
    largest = sorted(sizes.values())[-2:]
    assert sum(largest) <= budget, (sizes, budget)
    assert GGUF_SOURCES[build_registry([], None)[SMOLLM2_ID].source].conversion_bytes <= budget
    print({m: f"{b / MiB:.0f} MiB" for m, b in sizes.items()}, f"of {budget / MiB:.0f} MiB")


def _installed(model_id: str) -> bool:
    from atlas_engine.models.sources import unavailable_reason

    return unavailable_reason(build_registry([], None)[model_id]) is None


def test_a_config_claiming_a_million_layers_is_refused_before_it_is_built(
    local_checkpoints, tmp_path
):
    folder = tmp_path / "deep"
    shutil.copytree(local_checkpoints["local/gpt2-tiny"], folder)
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, "n_layer": 1_000_000}))
    spec = build_registry([f"bad/deep={folder}"], None)["bad/deep"]
    start = time.monotonic()
    with pytest.raises(ModelUnavailable, match="claims 1,000,000 layers"):
        model_size(spec, CACHE_DIR, CPU_FLOAT32, most=2 * 2**30)
    assert time.monotonic() - start < 1  # built on the meta device, it took minutes


def test_a_model_that_does_not_fit_beside_another_unloads_it_and_its_passes(local_checkpoints):
    """Two tiny models that do not fit in model_bytes together: the second unloads the first,
    the forward cache forgets the first's passes (their layer calls hold its modules), and the
    first's memory is given back."""
    extra = [f"{m}={local_checkpoints[m]}" for m in ("local/gpt2-tiny", "local/bert-tiny")]
    registry = build_registry(extra, None)
    one = model_size(registry["local/gpt2-tiny"], CACHE_DIR, CPU_FLOAT32).resident
    manager = ModelManager(
        registry, cache_dir=CACHE_DIR, token_limit=64, max_loaded=8, model_bytes=one + 4 * MiB
    )
    passes = Passes(manager, ForwardCache(8, 64 * MiB), AnswerBudget(64 * MiB, 1))
    first = manager.get("local/gpt2-tiny")
    passes.reserve(first, "The cat sat on the mat.", None).release()
    assert len(passes.cache) == 1
    weights = weakref.ref(next(first.model.parameters()))
    del first
    manager.get("local/bert-tiny")
    gc.collect()
    assert not manager.is_loaded("local/gpt2-tiny") and len(passes.cache) == 0
    assert weights() is None  # nothing holds the unloaded model
    assert manager.held_bytes() <= manager.model_bytes


def test_a_model_larger_than_model_bytes_alone_says_its_size_and_the_setting(local_checkpoints):
    extra = [f"local/gpt2-tiny={local_checkpoints['local/gpt2-tiny']}"]
    manager = ModelManager(
        build_registry(extra, None), cache_dir=CACHE_DIR, token_limit=64, max_loaded=2,
        model_bytes=8 * MiB,
    )  # fmt: skip
    with pytest.raises(ModelUnavailable, match=r"more than the 8 MiB that models may hold"):
        manager.get("local/gpt2-tiny")
    assert manager.state("local/gpt2-tiny").state == "failed"
