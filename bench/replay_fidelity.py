"""How far a replay's maps are from the model's own, per dtype and length, on any device.

    .venv/bin/python -m bench.replay_fidelity [--device cuda] [--texts N]

For each embedded model, dtype (float32, bfloat16, float16) and length (16 to 512 tokens of
README prose, N texts each): the model's own maps (eager attention, output_attentions, on the
device, in that dtype) against each layer replayed from the hidden states entering it
(atlas_engine.inference.replay: the layer's own call re-run in the model's dtype), and
against the maps the server shows (run_forward's: the replay in float32, the model's own in
half precision). Prints the largest absolute difference of each and the bound
atlas_engine.models.placement states
(REPLAY_MAX_ABS_DIFF); a bound passed is marked.
"""

from __future__ import annotations

import argparse

import torch

from app.main import create_app
from atlas_engine.config import Settings
from atlas_engine.inference.forward import run_forward, tokenize
from atlas_engine.inference.replay import replayed_maps
from atlas_engine.models.capture import implementation
from atlas_engine.models.placement import REPLAY_MAX_ABS_DIFF, model_device
from atlas_engine.models.registry import MINILM_ID, SMOLLM2_ID
from bench.compression import prose

DTYPES = ("float32", "bfloat16", "float16")
LENGTHS = (16, 64, 128, 256, 512)
TEXT_STARTS = 1500  # tokens between the starts of a length's texts


def worst_gaps(loaded, text: str) -> tuple[float, float, int]:
    """(largest |replay - own|, largest |shown - own|, tokens) over every layer of one text."""
    result = run_forward(loaded, text)
    inputs, _ = tokenize(loaded, text, None)
    device = model_device(loaded.model)
    with torch.inference_mode(), implementation(loaded.model, "eager"):
        own = loaded.model(
            **{k: v.to(device) for k, v in inputs.items()}, output_attentions=True
        ).attentions
    replay = shown = 0.0
    for layer, maps in enumerate(own):
        model_maps = maps[0].to("cpu", torch.float32)  # (H, T, T)
        replayed = replayed_maps(result.calls, result.hidden_inputs, layer)
        replay = max(replay, (replayed - model_maps).abs().max().item())
        shown = max(shown, (result.layer_maps(layer) - model_maps).abs().max().item())
    return replay, shown, result.seq_len


def run(device: str, texts: int) -> None:
    print(f"torch {torch.__version__}, device {device}", end="")
    if device == "cuda":
        print(f" ({torch.cuda.get_device_name(0)})", end="")
    print(f"; {texts} texts a length; largest absolute difference from the model's own maps")
    print(f"{'model':<10} {'dtype':<9} {'tokens':>6} {'replay':>9} {'shown':>9} {'bound':>7}")
    for dtype in DTYPES:
        app = create_app(Settings(preload=[], device=device, dtype=dtype))
        bound = REPLAY_MAX_ABS_DIFF[dtype]
        for model_id in (MINILM_ID, SMOLLM2_ID):
            loaded = app.state.manager.get(model_id)
            for n in LENGTHS:
                gaps = [
                    worst_gaps(loaded, prose(loaded.tokenizer, n, start=1 + i * TEXT_STARTS))
                    for i in range(texts)
                ]
                replay = max(g[0] for g in gaps)
                shown = max(g[1] for g in gaps)
                mark = "  over the bound" if max(replay, shown) > bound else ""
                print(
                    f"{model_id.split('/')[-1][:10]:<10} {dtype:<9} {gaps[0][2]:>6} "
                    f"{replay:>9.3g} {shown:>9.3g} {bound:>7g}{mark}",
                    flush=True,
                )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda", "mps"])
    parser.add_argument("--texts", type=int, default=3)
    args = parser.parse_args()
    run(args.device, args.texts)
