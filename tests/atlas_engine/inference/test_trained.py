"""A lab-trained model saved as GPT-2: transformers computes the same logits and maps."""

from __future__ import annotations

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from atlas_engine.inference.trained import save_checkpoint, to_gpt2, token_names
from atlas_engine.models.loader import load_model
from atlas_engine.models.registry import Family, ModelSpec, Source
from attention_core.training import TrainConfig, train

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module", params=[True, False], ids=["positions", "no-positions"])
def trained(request):
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    config = TrainConfig(steps=30, positions=request.param, layers=2, heads=4)
    run = train(config, 30, lambda s: None)
    torch.set_num_threads(before)
    return run.model


def test_gpt2_with_zero_mlps_computes_the_same_logits_and_maps(trained, tmp_path):
    folder = save_checkpoint(trained, tmp_path / "lab")
    gpt = AutoModelForCausalLM.from_pretrained(folder, attn_implementation="eager").eval()
    tokens = torch.randint(0, trained.config.vocab, (4, 24), generator=torch.Generator())
    with torch.no_grad():
        ours = trained(tokens)
        theirs = gpt(tokens, output_attentions=True)
    # float32 noise allowed: Conv1D's addmm and our matmul-then-add may round differently
    # (measured: equal bit for bit on this machine)
    torch.testing.assert_close(theirs.logits[..., : trained.config.vocab], ours.logits)
    for layer, maps in enumerate(theirs.attentions):
        torch.testing.assert_close(maps, ours.weights[layer])  # (batch, heads, T, T)


def test_the_mlps_are_zero_and_the_positions_are_the_models(trained):
    gpt = to_gpt2(trained)
    assert all(not p.detach().any() for b in gpt.transformer.h for p in b.mlp.parameters())
    assert torch.equal(gpt.transformer.wpe.weight, trained.pos)
    assert gpt.config.layer_norm_epsilon == trained.ln_f.eps == 1e-5


def test_the_tokenizer_names_every_token_and_splits_on_spaces(trained, tmp_path):
    save_checkpoint(trained, tmp_path / "lab")
    tok = AutoTokenizer.from_pretrained(tmp_path / "lab")
    names = token_names(trained.config.vocab)
    assert tok(" ".join(names), add_special_tokens=False)["input_ids"] == list(range(len(names)))
    assert tok("ba nonsense", add_special_tokens=False)["input_ids"] == [0, trained.config.vocab]


def test_atlas_opens_the_checkpoint_as_a_replayable_gpt2(trained, tmp_path):
    folder = save_checkpoint(trained, tmp_path / "lab")
    spec = ModelSpec("lab/induction", Source.FOLDER, "trained in the lab", folder=folder)
    loaded = load_model(spec, cache_dir=tmp_path / "cache", token_limit=24, progress=_quiet)
    assert loaded.family is Family.GPT2 and loaded.causal
    assert loaded.replay_refusal is None  # every head view, trace and ablation included
    assert (loaded.arch.num_layers, loaded.arch.num_heads) == (2, 4)


def _quiet(*_args) -> None:
    pass
