"""app.memory's allocator settings: 1 MiB thresholds, raised to PASS_MMAP_THRESHOLD_BYTES only
while a forward pass with tensors over 1 MiB runs, and the freed pages given back after it."""

import threading

import pytest
import torch

from app import memory
from app.inference.forward import largest_tensor_bytes, reused_tensor_bytes, run_forward
from app.models.registry import MINILM_ID
from bench.compression import prose


class FakeGlibc:
    """Records mallopt and malloc_trim calls as (name, *args)."""

    def __init__(self) -> None:
        self.calls: list[tuple] = []

    def mallopt(self, option: int, value: int) -> int:
        self.calls.append(("mallopt", option, value))
        return 1

    def malloc_trim(self, pad: int) -> int:
        self.calls.append(("malloc_trim", pad))
        return 1


@pytest.fixture
def glibc(monkeypatch) -> FakeGlibc:
    fake = FakeGlibc()
    monkeypatch.setattr(memory, "_glibc", lambda: fake)
    return fake


RAISE = ("mallopt", memory.M_MMAP_THRESHOLD, memory.PASS_MMAP_THRESHOLD_BYTES)
RESTORE = ("mallopt", memory.M_MMAP_THRESHOLD, memory.THRESHOLD_BYTES)


def test_the_process_starts_with_both_thresholds_at_one_mib(glibc):
    assert memory.return_freed_memory_to_the_os()
    assert glibc.calls == [
        ("mallopt", memory.M_MMAP_THRESHOLD, 1 << 20),
        ("mallopt", memory.M_TRIM_THRESHOLD, 1 << 20),
    ]


def test_a_pass_with_large_tensors_raises_the_threshold_then_gives_memory_back(glibc):
    with memory.tensors_reused_within(memory.THRESHOLD_BYTES):
        assert glibc.calls == [RAISE]
    assert glibc.calls == [RAISE, RESTORE, ("malloc_trim", 0)]


def test_a_pass_whose_tensors_are_all_small_changes_nothing(glibc):
    """Below 1 MiB the threshold never mattered, and a trim would cost the pass 0.2-1.3 ms."""
    with memory.tensors_reused_within(memory.THRESHOLD_BYTES - 1):
        pass
    assert glibc.calls == []


def test_overlapping_passes_restore_the_threshold_only_when_the_last_ends(glibc):
    first_in, second_done = threading.Event(), threading.Event()

    def second() -> None:
        first_in.wait()
        with memory.tensors_reused_within(64 << 20):
            pass
        second_done.set()

    other = threading.Thread(target=second)
    other.start()
    with memory.tensors_reused_within(64 << 20):
        first_in.set()
        second_done.wait(10)
        assert glibc.calls == [RAISE]  # the second pass ended inside the first: no restore
    other.join()
    assert glibc.calls == [RAISE, RESTORE, ("malloc_trim", 0)]


def test_an_error_inside_the_pass_still_restores_the_threshold(glibc):
    with pytest.raises(RuntimeError), memory.tensors_reused_within(64 << 20):
        raise RuntimeError("the pass failed")
    assert glibc.calls == [RAISE, RESTORE, ("malloc_trim", 0)]


def test_largest_tensor_bytes_is_a_layers_maps_or_its_mlp_activations(app):
    arch = app.state.manager.get(MINILM_ID).arch  # 12 heads, d_model 384
    assert largest_tensor_bytes(arch, 512) == 4 * 12 * 512 * 512  # the maps: 12.6 MB
    assert largest_tensor_bytes(arch, 16) == 4 * 4 * 16 * 384  # the MLP's: 98 KB
    assert largest_tensor_bytes(arch, 128) < memory.THRESHOLD_BYTES  # 786 KB: left alone
    assert largest_tensor_bytes(arch, 160) > memory.THRESHOLD_BYTES
    assert reused_tensor_bytes(arch, 512, "eager") == largest_tensor_bytes(arch, 512)
    assert reused_tensor_bytes(arch, 512, "sdpa") == 0  # fused passes allocate as before


@pytest.mark.parametrize("tokens", [16, 300])
def test_the_maps_of_a_pass_do_not_depend_on_how_its_memory_was_allocated(app, tokens):
    """The same pass, its tensors from the heap (300 tokens: 4.3 MB maps) or not (16)."""
    loaded = app.state.manager.get(MINILM_ID)
    text = prose(loaded.tokenizer, tokens)
    kept: dict[int, torch.Tensor] = {}
    result = run_forward(loaded, text, keep_maps=kept.__setitem__)
    encoding = loaded.tokenizer(text, return_tensors="pt")
    with torch.inference_mode():
        expected = loaded.model(**encoding, output_attentions=True).attentions
    assert result.seq_len == tokens
    for layer, maps in kept.items():
        assert torch.equal(maps, expected[layer][0])
