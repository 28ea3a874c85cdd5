"""Schemas of POST /api/image/attention: an image through a vision transformer, answered as the
rows one query token (the class token, or a patch) gives at every layer and head, with what
applies to patches (rollout, mean attention distance, the high-norm artifact tokens)."""

from __future__ import annotations

from pydantic import BaseModel, Field

MAX_QUERY = 65_535  # a token index; the real bound is the model's tokens for the image (422)


class ImageArtifact(BaseModel):
    """A token whose last-layer output norm is an outlier among the patches (Darcet et al.
    2023, "Vision Transformers Need Registers"), with the attention it receives."""

    token: int = Field(description="Its index among the tokens (prefix tokens first)")
    row: int = Field(description="Its patch's row in the grid")
    col: int = Field(description="Its patch's column in the grid")
    norm: float = Field(description="‖h‖ of its last-layer output")
    received: float = Field(
        description="The attention it receives in the last layer: mean over heads and queries"
    )


class ImageAttention(BaseModel):
    """One image's attention. T = prefix + rows x cols tokens; weights are float32 from the
    model's own output_attentions, written as the shortest decimal of each float32."""

    model: str
    layers: int
    heads: int
    patch: int = Field(description="A patch's side in pixels of the image as the model sees it")
    rows: int = Field(description="Patches down")
    cols: int = Field(description="Patches across")
    prefix: list[str] = Field(
        description="The tokens before the patches, by name: the class token, a distillation "
        "token (DeiT), registers (DINOv2 with registers)"
    )
    width: int = Field(description="The image as the model sees it: width in pixels")
    height: int = Field(description="... and height")
    image_png: str = Field(description="That image (resized, cropped, before normalisation), "
                           "PNG as base64")  # fmt: skip
    source: dict = Field(description="The image sent: its format, width and height")
    query: int = Field(description="The query token whose rows `weights` holds (0: the first "
                       "prefix token, prefix + r x cols + c: the patch at row r, column c)")  # fmt: skip
    weights: list[list[list[float]]] = Field(
        description="(layers, heads, T): the query's attention over every token"
    )
    rollout: list[float] = Field(
        description="(T): the query's row of attention rollout (Abnar & Zuidema 2020): "
        "per layer residual x I + (1 - residual) x the heads' mean, rows renormalised, "
        "multiplied from the first layer to the last"
    )
    rollout_residual: float
    distance: list[list[float]] = Field(
        description="(layers, heads): mean attention distance in pixels (the ViT paper's): "
        "over patch queries, the weight-averaged distance to patch keys"
    )
    roles: dict[str, list[list[float]]] = Field(
        description="Each head's statistics over its patch queries, name -> (layers, heads): "
        "self (weight on its own patch), neighbours (on the up to 8 around it), prefix (on the "
        "prefix tokens: the image's sink), entropy (of its row, divided by log T)"
    )
    received: list[list[float]] = Field(
        description="(layers, T): the attention each token receives, mean over heads and queries"
    )
    norms: list[float] = Field(description="(T): each token's last-layer output norm")
    artifacts: list[ImageArtifact]
    seconds: float = Field(description="The forward pass, in seconds")


class ImageSample(BaseModel):
    """A bundled sample image: GET /api/image/samples/{name} gives its file."""

    name: str
    title: str
    credit: str
    licence: str
