"""Where models run: the device and dtype an operator chose, resolved against this machine.

Forward passes and replays run on the model's device in its dtype. What leaves the device is
the model's own maps and the hidden states entering each layer, converted to float32 on the
host (exact: every bfloat16 and float16 value is a float32 value), because answers and the
forward cache are host memory. Analyses of cached maps (rollout, head statistics) run where
the maps are held; moving (L, H, T, T) back to a GPU costs more than those few matmuls.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import torch

DeviceName = Literal["auto", "cpu", "cuda", "mps"]
DtypeName = Literal["float32", "bfloat16", "float16"]
DTYPES: dict[str, torch.dtype] = {
    "float32": torch.float32,
    "bfloat16": torch.bfloat16,
    "float16": torch.float16,
}


@dataclass(frozen=True)
class Placement:
    """A resolved device and the dtype models are loaded in."""

    device: torch.device
    dtype: torch.dtype

    @property
    def dtype_name(self) -> str:
        return str(self.dtype).removeprefix("torch.")


REPLAY_MAX_ABS_DIFF: dict[str, float] = {"float32": 1e-5, "bfloat16": 0.15, "float16": 0.02}
"""How far a replay (float32, from the model's weights) may be from the model's own maps, per
model dtype. float32: rounding order only; the replay makes the model's own calls (F.linear,
then q k^T times the scale, then softmax), and on a CPU every replayable family here comes out
equal bit for bit (tests/app/test_attention_fidelity.py); on an NVIDIA H100 at most 8.9e-7 (seven
families, 14 to 512 tokens, four texts each). Half precision: the model rounds its q, k and
scores and the replay does not, and the gap grows with the text: over 14 to 512 tokens, every
layer, at most 0.082 in bfloat16 and 0.011 in float16 (MiniLM on this machine's CPU; SmolLM2-135M
0.036 and 0.0041; MiniLM on the H100 0.078 and 0.0100), each bound about twice that. Every
detail answer reports its own difference (replay_max_abs_diff)."""

FUSED_PASS_MAX_ABS_DIFF = 1e-3
"""How far a float32 replay may be from transformers' own eager weights when the pass it
replays ran PyTorch's fused attention (a text whose one layer of maps passes
inference.forward.EAGER_LAYER_BYTES: SmolLM2 above 1,365 tokens). The replay of the layer is
exact for that pass, but the pass is not the eager pass output_attentions runs: each earlier
layer's fused kernel rounds its output differently (within 1e-6), the residual stream carries
the difference on, and the layers after amplify it where their scores are large and close.
Measured at SmolLM2's whole context in docs/faithful-numbers.md (random vocabulary words drift
most, at the last layer); tests/atlas_engine/test_zoom_bound.py holds it on every layer of random
words at the whole context, and of three other kinds of text at 2,048 tokens."""

MAPS_VS_FLOAT32_MAX_ABS_DIFF: dict[str, float] = {"bfloat16": 0.3, "float16": 0.03}
"""How far a half-precision model's maps lie from the same model's in float32 (not a guarantee:
rounding compounds layer by layer). Measured on MiniLM and SmolLM2-135M over 19 to 81 tokens:
bfloat16 at most 0.21 (mean 2.7e-4), float16 at most 0.012 (mean 2.9e-5); over 64 to 512
tokens (nine texts each): bfloat16 at most 0.14, float16 at most 0.012."""

CPU_FLOAT32 = Placement(torch.device("cpu"), torch.float32)
"""The default: what the bit-exact tests against transformers' float32 output use."""


def _mps_available() -> bool:
    backend = getattr(torch.backends, "mps", None)
    return bool(backend is not None and backend.is_available())


def resolve_device(name: DeviceName) -> torch.device:
    """'auto' is the first of cuda, mps, cpu this machine has; asking for one it lacks is an
    error at start-up (ValueError), never a silent fall back to the CPU."""
    if name == "auto":
        if torch.cuda.is_available():
            return torch.device("cuda")
        return torch.device("mps" if _mps_available() else "cpu")
    if name == "cuda" and not torch.cuda.is_available():
        raise ValueError(
            "ATLAS_DEVICE=cuda but torch sees no CUDA device (is this torch a CPU build, or "
            "the GPU hidden from the container?); use auto or cpu"
        )
    if name == "mps" and not _mps_available():
        raise ValueError("ATLAS_DEVICE=mps but this machine has no Apple GPU; use auto or cpu")
    return torch.device(name)


def resolve_placement(device: DeviceName, dtype: DtypeName) -> Placement:
    return Placement(device=resolve_device(device), dtype=DTYPES[dtype])


def model_device(model: torch.nn.Module) -> torch.device:
    """The device a model's weights are on (the first parameter's; we never split models)."""
    return next(model.parameters()).device
