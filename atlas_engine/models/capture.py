"""One function registered with transformers' attention interface, so that every model which
routes its attention through that interface can be replayed a layer at a time, with no code per
architecture.

transformers 5 models call `ALL_ATTENTION_FUNCTIONS.get_interface(impl, eager_attention_forward)`
with the layer's module, q after any q/k norm and RoPE (batch, heads, T, head_dim), k and v at
the key/value-head count, the 4-D mask, and the family's extras as keywords (`scaling`,
`softcap`, `s_aux` for sinks, `position_bias`, `sliding_window`). Atlas loads such models under
KEY and registers:

- `capture` as KEY's attention function. With no recorder active it is exactly the model file's
  own eager_attention_forward (bit for bit: the same function on the same tensors). A pass that
  wants no maps may run PyTorch's fused kernel instead (`Recorder.fused`), as Atlas's long
  passes always have. A replay records the layer's tensors and stops the module there.
- `capture_mask` as KEY's mask builder: transformers' eager_mask (the additive float mask eager
  attention adds to its scores). Without a mask builder under the same key transformers builds
  no mask at all and a model silently runs unmasked. Each mask built is remembered with how it
  was built (`MaskRecipe`), so a pass keeps a few numbers per mask instead of T² of them and a
  replay rebuilds the mask when it needs it.

A pass records each attention module's inputs (`LayerCall`, atlas_engine.inference.forward); replaying a
layer re-runs the module from them (`capture_layer`), which yields exactly the q, k and v the
pass computed: the hidden states are the pass's own, and so is every operation.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor, nn
from transformers import AttentionInterface
from transformers.masking_utils import (
    AttentionMaskInterface,
    bidirectional_mask_function,
    causal_mask_function,
    eager_mask,
    sdpa_mask,
)

KEY = "atlas"

ARITHMETIC = frozenset({"scaling", "softcap", "s_aux", "position_bias", "dropout"})
"""Keywords that change what a head computes: each is replayed (attention_core.modern)."""
HINTS = frozenset({"sliding_window"})
"""Keywords that only tell fused kernels what the mask already holds (eager reads the mask)."""
INERT = frozenset({
    "output_attentions", "output_hidden_states", "return_dict", "use_cache", "position_ids",
    "cache_position", "deterministic", "encoder_hidden_states", "is_causal", "head_mask",
    "token_type_ids",
})  # fmt: skip
"""Keywords models pass on to every attention function that eager attention ignores."""
CACHE_KEYWORDS = ("past_key_values", "past_key_value", "cache", "layer_past")
"""A module's keyword arguments that hold the generation cache: a replay drops them, so the
module recomputes k and v from the pass's hidden states instead of appending to a cache."""


class Refused(Exception):
    """A model or layer that capture cannot replay faithfully; the message says why."""


def eager_of(module: nn.Module) -> Callable:
    """The eager attention function of the modeling file that defines `module`'s class."""
    own = getattr(sys.modules[type(module).__module__], "eager_attention_forward", None)
    if own is None:
        raise Refused(
            f"{type(module).__name__}'s modeling file has no eager_attention_forward to replay"
        )
    return own


@dataclass(frozen=True)
class MaskRecipe:
    """How a mask was built: transformers' mask builder's keywords (mask_function, lengths,
    offsets, the 2-D padding mask, local_size...). `build()` makes the same float mask again
    (batch, 1, q_len, kv_len); `block()` any block of it, built alone."""

    keywords: dict[str, Any] = field(hash=False)

    @property
    def windowed(self) -> bool:
        return self.keywords.get("local_size") is not None

    @property
    def plain(self) -> bool:
        """A causal or full mask with no padding: what attention_core.tiles applies itself."""
        padding = self.keywords.get("attention_mask")
        unpadded = padding is None or bool(padding.all())
        kinds = (causal_mask_function, bidirectional_mask_function)
        return not self.windowed and unpadded and self.keywords.get("mask_function") in kinds

    def build(self) -> Tensor | None:
        return eager_mask(**self.keywords)

    def stand_in(self) -> Tensor:
        """A mask of the recipe's shape and dtype that holds one number (a zero, expanded):
        what a replay hands a module that only passes its mask on to the attention function,
        where the recorder reads the recipe instead (a whole mask at 8,192 tokens is 268 MB)."""
        k = self.keywords
        shape = (k.get("batch_size", 1), 1, k["q_length"], k["kv_length"])
        zero = torch.zeros((), dtype=k.get("dtype", torch.float32), device=k.get("device", "cpu"))
        return zero.expand(shape)

    def block(self, r0: int, r1: int, c0: int, c1: int) -> Tensor:
        """(r1 - r0, c1 - c0) bool of the first sequence: the mask's block of queries r0:r1
        and keys c0:c1, built alone (transformers' sdpa_mask with offsets: the same as that
        slice of the whole mask, tests/atlas_engine/models/test_capture.py)."""
        keywords = {
            **self.keywords, "q_length": r1 - r0, "kv_length": c1 - c0,
            "q_offset": self.keywords.get("q_offset", 0) + r0,
            "kv_offset": self.keywords.get("kv_offset", 0) + c0,
            "allow_is_causal_skip": False, "allow_is_bidirectional_skip": False,
        }  # fmt: skip
        mask = sdpa_mask(**keywords)
        if mask is None:
            return torch.ones(r1 - r0, c1 - c0, dtype=torch.bool)
        return mask[0, 0]


class Recorder:
    """What one `capture` context does with the calls it sees. The base records nothing and
    computes every layer as the model's own eager attention, or with PyTorch's fused kernel
    where `fused` (no maps are wanted and no extra the kernel lacks is in play)."""

    fused = False

    def __init__(self) -> None:
        self.masks: dict[int, tuple[Tensor, MaskRecipe]] = {}  # id(mask) -> (mask, recipe)

    def on_mask(self, mask: Tensor | None, keywords: dict) -> None:
        if mask is not None:  # kept alive with the pass, so its id is not reused
            self.masks[id(mask)] = (mask, MaskRecipe(dict(keywords)))

    def recipe_of(self, value: Any) -> MaskRecipe | None:
        kept = self.masks.get(id(value))
        return kept[1] if kept is not None and kept[0] is value else None

    def on_call(
        self, module: nn.Module, q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None, kw: dict
    ) -> tuple[Tensor, Tensor | None]:
        return compute(module, q, k, v, mask, kw, fused=self.fused)


_active: ContextVar[Recorder | None] = ContextVar("atlas_capture", default=None)


@contextmanager
def recording(recorder: Recorder) -> Iterator[Recorder]:
    """Make `recorder` see every attention call and mask built in this context (this thread or
    task only: a pass nested inside another, atlas_engine.compute.run_beside, has its own)."""
    token = _active.set(recorder)
    try:
        yield recorder
    finally:
        _active.reset(token)


def unknown_keywords(kw: dict) -> list[str]:
    return sorted(set(kw) - ARITHMETIC - HINTS - INERT)


def compute(
    module: nn.Module,
    q: Tensor,
    k: Tensor,
    v: Tensor,
    mask: Tensor | None,
    kw: dict,
    *,
    fused: bool = False,
) -> tuple[Tensor, Tensor | None]:
    """The layer's attention as the model computes it: its own eager function, or where `fused`
    and no softcap, sinks or position bias are in play, PyTorch's fused kernel on the same mask
    (the output only: (batch, T, heads, head_dim_v), weights None)."""
    plain = all(kw.get(name) is None for name in ("softcap", "s_aux", "position_bias"))
    if mask is not None and mask.dtype == torch.bool and not (fused and plain):
        mask = torch.where(mask, 0.0, torch.finfo(q.dtype).min).to(q.dtype)  # eager's form
    if fused and plain and not module.training:
        group = q.shape[1] // k.shape[1]
        out = torch.nn.functional.scaled_dot_product_attention(
            q,
            k.repeat_interleave(group, dim=1),
            v.repeat_interleave(group, dim=1),
            attn_mask=mask,
            scale=kw.get("scaling"),
        )
        return out.transpose(1, 2).contiguous(), None
    return eager_of(module)(module, q, k, v, mask, **kw)


def capture(
    module: nn.Module,
    query: Tensor,
    key: Tensor,
    value: Tensor,
    attention_mask: Tensor | None,
    **kw: Any,
) -> tuple[Tensor, Tensor | None]:
    """KEY's attention function (see the module docstring)."""
    recorder = _active.get()
    if recorder is None:
        return eager_of(module)(module, query, key, value, attention_mask, **kw)
    return recorder.on_call(module, query, key, value, attention_mask, kw)


def capture_mask(**keywords: Any) -> Tensor | None:
    """KEY's mask builder: transformers' eager_mask (the additive float mask eager attention
    adds), remembered by the active recorder. A fused pass gets the same mask as bool (True =
    may attend, what PyTorch's fused kernel reads): a quarter of the bytes, 67 MB instead of
    268 MB at 8,192 tokens; `compute` turns it back into eager's where eager runs."""
    recorder = _active.get()
    if recorder is not None and recorder.fused:
        mask = sdpa_mask(**{**keywords, "allow_is_causal_skip": False})
    else:
        mask = eager_mask(**keywords)
    if recorder is not None:
        recorder.on_mask(mask, keywords)
    return mask


AttentionInterface.register(KEY, capture)
AttentionMaskInterface.register(KEY, capture_mask)  # the class's: an instance's is not read


# --- one layer's capture ---------------------------------------------------------------------


@dataclass(frozen=True)
class LayerCapture:
    """What one layer's attention function received, for the first sequence of the batch, on
    the model's device in the model's dtype. attention_core.modern computes the weights from it
    exactly as the model's eager function does."""

    q: Tensor  # (heads, T_q, head_dim): after the model's q norm and RoPE
    k: Tensor  # (kv_heads, T_k, head_dim)
    v: Tensor  # (kv_heads, T_k, head_dim_v)
    mask: MaskRecipe | Tensor | None  # how the layer's mask is built, or the mask itself
    scale: float
    softcap: float | None = None  # scores become tanh(s / c) * c (Gemma 2)
    sinks: Tensor | None = None  # (heads,): a logit per head that takes its share of each row
    bias: Tensor | None = None  # (heads, T_q, T_k) added to the scores (T5's position bias)
    sequence: int = 0  # which sequence of the batch (the server's passes have one)

    @property
    def n_heads(self) -> int:
        return self.q.shape[0]

    @property
    def group(self) -> int:
        """Query heads per key/value head (1 without GQA or MQA)."""
        return self.q.shape[0] // self.k.shape[0]

    @property
    def head_dim(self) -> int:
        return self.q.shape[-1]

    @property
    def seq(self) -> int:
        return self.q.shape[1]

    def allowed(self) -> Tensor | None:
        """(T_q, T_k) bool on the host, True where a query may read a key; None: every key."""
        mask = self.mask.build() if isinstance(self.mask, MaskRecipe) else self.mask
        if mask is None:
            return None
        mask = mask[self.sequence if mask.shape[0] > 1 else 0, 0] if mask.dim() == 4 else mask
        if mask.dtype == torch.bool:  # a mask the model built itself, True = may attend
            return mask.cpu()
        allowed = mask == 0
        if not bool((allowed | (mask == torch.finfo(mask.dtype).min)).all()):
            raise Refused(
                "this layer's mask holds values other than 0 and -inf: a bias Atlas does not replay"
            )
        return allowed.cpu()

    @property
    def plain(self) -> bool:
        """No softcap, sinks or bias: a head's weights are a masked softmax of q k^T times scale."""
        return self.softcap is None and self.sinks is None and self.bias is None


class _Recorded(Exception):
    """Raised by a replay's recorder once the layer's inputs are kept: nothing after is wanted."""


class _MaskNeeded(Exception):
    """A module made a mask of its own from a stand-in (MaskRecipe.stand_in): replay it again
    with the whole mask built."""


class _LayerRecorder(Recorder):
    def __init__(
        self, target: nn.Module, recipes: dict[int, MaskRecipe], sequence: int, stand_ins: bool
    ) -> None:
        super().__init__()
        self.target = target
        self.sequence = sequence
        self.recipes = recipes  # data_ptr of a mask handed to the module -> its recipe
        self.stand_ins = stand_ins
        self.captured: LayerCapture | None = None
        self.batch: tuple[Tensor, Tensor, Tensor] | None = None  # q, k, v of every sequence

    def on_call(self, module, q, k, v, mask, kw):
        if module is not self.target:
            return super().on_call(module, q, k, v, mask, kw)
        unknown = unknown_keywords(kw)
        if unknown:
            raise Refused(
                f"{type(module).__name__} passes its attention function {unknown}, which Atlas "
                "does not know how to replay"
            )
        recipe = None if mask is None else self.recipes.get(mask.data_ptr())
        if recipe is None and mask is not None and self.stand_ins:
            raise _MaskNeeded
        scaling = kw.get("scaling")
        sinks = kw.get("s_aux")
        bias = kw.get("position_bias")
        b = self.sequence
        self.batch = (q, k, v)
        self.captured = LayerCapture(
            q=q[b],
            k=k[b],
            v=v[b],
            mask=mask if recipe is None else recipe,
            sequence=b,
            scale=float(q.shape[-1] ** -0.5 if scaling is None else scaling),
            softcap=kw.get("softcap"),
            sinks=None if sinks is None else sinks.reshape(-1),
            bias=None if bias is None else bias[b if bias.shape[0] > 1 else 0],
        )
        raise _Recorded


@dataclass
class LayerCall:
    """One attention module's call in a pass, to call it again: its arguments with the hidden
    states left out (`HIDDEN` marks their place) and every mask as its recipe."""

    module: nn.Module = field(repr=False)
    args: tuple
    kwargs: dict

    def tensors(self) -> Iterator[Tensor]:
        """The tensors its arguments hold (a tensor shared by several calls is each one's)."""
        return _tensors((self.args, self.kwargs))


HIDDEN = object()  # where a LayerCall's hidden states go


def _tensors(value: Any) -> Iterator[Tensor]:
    if isinstance(value, Tensor):
        yield value
    elif isinstance(value, (tuple, list)):
        for item in value:
            yield from _tensors(item)
    elif isinstance(value, dict):
        for item in value.values():
            yield from _tensors(item)


def record_call(
    recorder: Recorder, module: nn.Module, args: tuple, kwargs: dict
) -> tuple[Tensor, LayerCall]:
    """(the hidden states entering `module`, its call with them left out), from a forward
    pre-hook's arguments: the hidden states are `hidden_states` or the first argument; cache
    keywords are dropped and masks the recorder built become their recipes."""

    def keep(value: Any) -> Any:
        recipe = recorder.recipe_of(value)
        if recipe is not None:
            return recipe
        if isinstance(value, tuple):
            return tuple(keep(item) for item in value)
        return value

    if "hidden_states" in kwargs:
        hidden = kwargs["hidden_states"]
        kwargs = {**kwargs, "hidden_states": HIDDEN}
    else:
        hidden, args = args[0], (HIDDEN, *args[1:])
    kept = {name: keep(value) for name, value in kwargs.items() if name not in CACHE_KEYWORDS}
    return hidden, LayerCall(module, tuple(keep(a) for a in args), kept)


def capture_layer(call: LayerCall, hidden: Tensor, sequence: int = 0) -> LayerCapture:
    """Re-run one attention module on `hidden` (batch, T, d_model) with the rest of its call as
    the pass made it, stopping inside its attention function: what that function received for
    sequence `sequence` of the batch. Masks are handed over as stand-ins first (the module
    passes them on; the recorder reads their recipes), and built whole only where the module
    computes with its mask before the attention function."""
    return _replay(call, hidden, sequence, grad=False).captured


def capture_batch(
    call: LayerCall, hidden: Tensor, *, grad: bool = False
) -> tuple[LayerCapture, tuple[Tensor, Tensor, Tensor]]:
    """capture_layer for the first sequence, and q, k and v of every sequence of `hidden`
    ((batch, heads, T, hd), (batch, kv_heads, T, hd) twice). grad: they keep autograd's graph
    back to `hidden` (the call's own tensors must then not be inference tensors)."""
    recorder = _replay(call, hidden, 0, grad=grad)
    return recorder.captured, recorder.batch


def _replay(call: LayerCall, hidden: Tensor, sequence: int, grad: bool) -> _LayerRecorder:
    try:
        return _replayed(call, hidden, sequence, stand_ins=True, grad=grad)
    except _MaskNeeded:
        return _replayed(call, hidden, sequence, stand_ins=False, grad=grad)


def _replayed(
    call: LayerCall, hidden: Tensor, sequence: int, stand_ins: bool, grad: bool
) -> _LayerRecorder:
    recipes: dict[int, MaskRecipe] = {}

    def put(value: Any) -> Any:
        if value is HIDDEN:
            return hidden
        if isinstance(value, MaskRecipe):
            mask = value.stand_in() if stand_ins else value.build()
            if mask is not None:
                recipes[mask.data_ptr()] = value
            return mask
        if isinstance(value, tuple):
            return tuple(put(item) for item in value)
        return value

    args = tuple(put(a) for a in call.args)
    kwargs = {name: put(value) for name, value in call.kwargs.items()}
    recorder = _LayerRecorder(call.module, recipes, sequence, stand_ins)
    # _Recorded is raised once the layer's inputs are kept
    context = torch.enable_grad() if grad else torch.inference_mode()
    with recording(recorder), context, contextlib.suppress(_Recorded):
        call.module(*args, **kwargs)
    if recorder.captured is None:
        raise Refused(
            f"{type(call.module).__name__} did not call its attention function when replayed"
        )
    return recorder


@contextmanager
def implementation(model: nn.Module, name: str) -> Iterator[None]:
    """Run `model` with attention implementation `name` ("eager", "sdpa"...) inside the block,
    then put back the one it had (for comparisons and benches: the server keeps KEY)."""
    before = model.config._attn_implementation
    if name != before:
        model.set_attn_implementation(name)
    try:
        yield
    finally:
        if name != before:
            model.set_attn_implementation(before)


# --- what a model's config says before it is loaded --------------------------------------------


def config_refusal(config: Any, model_class: type | None) -> str | None:
    """Why a model's heads cannot be replayed, from its config and class alone (no weights);
    None where the capture path may replay them (a load probe then checks, probe_layers)."""
    text = getattr(config, "text_config", None) or config
    if "linear_attention" in (getattr(text, "layer_types", None) or ()):
        return (
            "its linear-attention layers (Qwen3.5, Qwen3-Next) hold no attention map, and its "
            "gated attention outputs are not what the map mixes"
        )
    if getattr(text, "kv_lora_rank", None):
        return (
            "it uses multi-head latent attention (DeepSeek MLA): its keys and values come from a "
            "shared latent, so a head's key/value heads are not what Atlas shows"
        )
    if getattr(text, "reorder_and_upcast_attn", False):
        return (
            "its config sets reorder_and_upcast_attn, which GPT-2 computes only under eager "
            "attention, outside the interface Atlas replays"
        )
    if model_class is not None and not model_class._can_set_attn_implementation():
        return (
            f"{model_class.__name__} computes attention in its own code, outside transformers' "
            "attention interface that Atlas replays: its maps are shown as the model returns them"
        )
    return None


def replay_refusal_of(config: dict) -> str | None:
    """config_refusal from a config.json's contents, the class found by its model_type as
    transformers' AutoModel would (nothing is loaded); a load's probe may still refuse."""
    import transformers
    from transformers import AutoConfig
    from transformers.models.auto.modeling_auto import MODEL_MAPPING_NAMES

    fields = {k: v for k, v in config.items() if k != "model_type"}
    parsed = AutoConfig.for_model(config["model_type"], **fields)
    names = MODEL_MAPPING_NAMES.get(config["model_type"])
    name = names[0] if isinstance(names, (tuple, list)) else names
    model_class = getattr(transformers, name, None) if name else None
    return config_refusal(parsed, model_class)


class _Probe(Recorder):
    def __init__(self) -> None:
        super().__init__()
        self.modules: list[nn.Module] = []
        self.unknown: set[str] = set()

    def on_call(self, module, q, k, v, mask, kw):
        if q.shape[2] == k.shape[2]:  # self-attention (a cross-attention's keys are another's)
            self.modules.append(module)
        self.unknown.update(unknown_keywords(kw))
        return super().on_call(module, q, k, v, mask, kw)


def probe_layers(model: nn.Module, inputs: dict[str, Tensor], num_layers: int) -> list[nn.Module]:
    """The model's self-attention modules in layer order, found by one short pass under
    capture; Refused (saying why) where a pass does not call capture once a layer or passes it
    a keyword Atlas does not know."""
    with recording(_Probe()) as probe, torch.inference_mode():
        model(**inputs)
    if probe.unknown:
        raise Refused(
            f"its attention layers pass {sorted(probe.unknown)} to the attention function, "
            "which Atlas does not know how to replay"
        )
    if len(probe.modules) != num_layers or len(set(map(id, probe.modules))) != num_layers:
        raise Refused(
            f"a pass called transformers' attention interface {len(probe.modules)} times for "
            f"{num_layers} layers: its attention is computed outside the interface Atlas replays"
        )
    return probe.modules


def attach(
    model: nn.Module, inputs: dict[str, Tensor], num_layers: int
) -> tuple[list[nn.Module], str | None]:
    """Switch `model` to the capture function and find its layers with a short pass over
    `inputs`: (each layer's self-attention module, None); or ([], why its heads cannot be
    replayed), the model left on eager attention."""
    refusal = config_refusal(model.config, type(model))
    if refusal is not None:
        return [], refusal
    model.set_attn_implementation(KEY)
    try:
        return probe_layers(model, inputs, num_layers), None
    except Refused as err:
        model.set_attn_implementation("eager")
        return [], str(err)
