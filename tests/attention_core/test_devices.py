"""attention_core runs on whatever device its inputs are on (a server with ATLAS_DEVICE=cuda
replays heads on the GPU). Without a GPU here, two checks stand in for one:

- the variants without data-dependent steps run on PyTorch's `meta` device,
  where any tensor made on the CPU by mistake raises at once;
- every tensor factory in the package names its device, except in functions that build a
  tensor from plain numbers (no tensor input to take a device from), listed here by name.
"""

import ast
from pathlib import Path

import pytest
import torch

import attention_core as ac
from attention_core.aggregate import js_divergence, rollout_steps

META = torch.device("meta")
FACTORIES = {"zeros", "ones", "arange", "empty", "full", "eye", "randn", "rand", "linspace"}
BUILT_FROM_NUMBERS = {
    "score_variance",  # samples random q, k for a given d_k
    "random_mask",  # draws on a seeded CPU generator, then moves to the asked device
    "random", "weight", "maybe_bias",  # multihead's seeded random projections
    "sinusoidal_encoding", "rope_inverse_frequencies", "sinusoidal_shift_matrix",
    # the training lab builds its model and seeded batches on the CPU, one thread, by design
    # (attention_core.training): its parameters and data are made, not derived from inputs
    "make_batch", "trained_targets", "target_halves", "__init__",
}  # fmt: skip
PACKAGE = Path(ac.__file__).parent


def meta(*shape: int) -> torch.Tensor:
    return torch.empty(*shape, device=META)


q = k = v = meta(1, 2, 5, 4)
ON_META = {
    "scaled_dot_product_attention": lambda: (
        ac.scaled_dot_product_attention(q, k, v, ac.causal_mask(5, device=META)).weights
    ),
    "linear_attention": lambda: ac.linear_attention(q, k, v, causal=True).output,
    "rope_cos_sin": lambda: ac.rope_cos_sin(torch.arange(5, device=META), 4)[0],
    "rope_scores_by_position": lambda: ac.rope_scores_by_position(meta(4), meta(4), 5),
    "entropy": lambda: ac.entropy(meta(3, 5)),
    "max_weight": lambda: ac.max_weight(meta(3, 5)),
    "rollout_steps": lambda: list(rollout_steps(meta(2, 2, 5, 5)))[-1],
    "js_divergence": lambda: js_divergence(meta(5), meta(5)),
}


@pytest.mark.parametrize("name", ON_META)
def test_runs_on_the_device_of_its_inputs(name):
    assert ON_META[name]().device == META


def factories_without_device(package: Path = PACKAGE) -> list[str]:
    found = []
    for path in sorted(package.glob("*.py")):
        for fn in ast.walk(ast.parse(path.read_text())):
            if not isinstance(fn, ast.FunctionDef) or fn.name in BUILT_FROM_NUMBERS:
                continue
            for node in ast.walk(fn):
                if (
                    isinstance(node, ast.Call)
                    and isinstance(node.func, ast.Attribute)
                    and isinstance(node.func.value, ast.Name)
                    and node.func.value.id == "torch"
                    and node.func.attr in FACTORIES
                    and not any(kw.arg == "device" for kw in node.keywords)
                ):
                    found.append(f"{path.name}:{node.lineno} {fn.name}: torch.{node.func.attr}")
    return found


def test_every_tensor_factory_names_its_device():
    assert factories_without_device() == []


def test_the_factory_check_sees_a_factory_without_device(tmp_path):
    (tmp_path / "bad.py").write_text("import torch\ndef f(x):\n    return torch.ones(3)\n")
    assert factories_without_device(tmp_path) == ["bad.py:3 f: torch.ones"]
