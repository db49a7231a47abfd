"""Whole-model quantization behind ``Model.quantize / dequantize / quant_info`` (:mod:`libreyolo.model`).

It lives in ``kernels`` (not in the reference package :mod:`libreyolo.quant`) because the
quantized layers it installs dispatch through the kernel registry; it imports nothing above
floor 1 and takes the model duck-typed. Works on any ``nn.Module`` (a Family's ``model.net``), so it is family-agnostic: every
``nn.Conv2d`` and ``nn.Linear`` (except those matched by ``exclude``) becomes a simulated
quantized layer. Recipes:

* ``"fp8"`` — FP8 E4M3 weights (per output channel) and activations (per tensor).
* ``"int8"`` — W8A8: symmetric INT8 weights (per output channel) and activations (per tensor).

Activation scales come from min-max calibration over a few batches (``calibrate=``); without
calibration data only the weights are quantized (weight-only). ``finalize=True`` packs the
weights (the checkpoint contract) for inference through the execute path. Training a
simulated-quantized model is QAT (the fake-quant ops have straight-through backward).
"""

from __future__ import annotations

import fnmatch
import logging
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

import torch
from torch import Tensor, nn

from ...errors import ConfigError, check_keys
from ...quant.formats import get_format
from .. import registry
from .modules import PACKED_TYPES, QUANT_TYPES, PackedConv2d, PackedLinear, QuantConv2d, QuantLinear

logger = logging.getLogger(__name__)

Recipe = Literal["fp8", "int8"]
RECIPES: dict[str, str] = {"fp8": "fp8_e4m3", "int8": "int8"}


@dataclass(frozen=True, kw_only=True)
class QuantConfig:
    """Arguments of ``model.quantize(...)``.

    Attributes:
        recipe: ``"fp8"`` (E4M3) or ``"int8"`` (W8A8).
        calibrate: calibration data — a Tensor[B, 3, H, W] float batch, or an iterable of such
            batches (or of dicts with an ``"img"`` tensor, as a training DataLoader yields);
            None for weight-only quantization.
        batches: at most this many batches are used for min-max calibration.
        finalize: pack the weights for inference (no further training).
        exclude: ``fnmatch`` patterns of module names (``net.named_modules()``) left in float.
    """

    recipe: Recipe = "fp8"
    calibrate: Any = None
    batches: int = 4
    finalize: bool = False
    exclude: tuple[str, ...] = ()

    @classmethod
    def build(cls, overrides: Mapping[str, Any]) -> QuantConfig:
        check_keys(overrides, [f for f in cls.__dataclass_fields__], what="quantize")
        o = dict(overrides)
        if o.get("recipe", "fp8") not in RECIPES:
            raise ConfigError(f"unknown quantization recipe {o['recipe']!r}; recipes: fp8, int8")
        b = o.get("batches", 4)
        if not isinstance(b, int) or isinstance(b, bool) or b < 1:
            raise ConfigError(f"batches must be a positive int, got {b!r}")
        ex = o.get("exclude", ())
        o["exclude"] = (ex,) if isinstance(ex, str) else tuple(ex)
        o["finalize"] = bool(o.get("finalize", False))
        return cls(**o)


@dataclass(kw_only=True)
class QuantState:
    """What ``quantize`` did; kept on the model as ``model.quant``."""

    recipe: str
    format: str
    finalized: bool = False
    calibration_batches: int = 0
    modules: list[str] = field(default_factory=list)
    excluded: list[str] = field(default_factory=list)


def _net(model: Any) -> nn.Module:
    net = getattr(model, "net", model)
    if not isinstance(net, nn.Module):
        raise ConfigError(f"quantization needs a libreyolo model or an nn.Module, got {type(model).__name__}")
    return net


def _set_module(net: nn.Module, name: str, new: nn.Module) -> None:
    parent_name, _, child = name.rpartition(".")
    parent = net.get_submodule(parent_name) if parent_name else net
    setattr(parent, child, new)


def _batches(source: Any, limit: int) -> Iterable[Tensor]:
    if isinstance(source, Tensor):
        source = [source]
    elif isinstance(source, (str, bytes)) or not isinstance(source, Iterable):
        raise ConfigError(
            f"calibrate= takes a Tensor[B, 3, H, W] batch or an iterable of batches, got "
            f"{type(source).__name__}; preprocess images first (e.g. a DataLoader of the training set)"
        )
    n = 0
    for item in source:
        if n >= limit:
            break
        if isinstance(item, Mapping):
            item = item.get("img")
        elif isinstance(item, (tuple, list)) and item:
            item = item[0]
        if not isinstance(item, Tensor) or item.dim() != 4:
            raise ConfigError(f"calibration batch must be a Tensor[B, 3, H, W], got {type(item).__name__}")
        n += 1
        yield item


def _calibrate(net: nn.Module, layers: list[QuantConv2d | QuantLinear], cfg: QuantConfig) -> int:
    device = next((p.device for p in net.parameters()), torch.device("cpu"))
    was_training = net.training
    for m in layers:
        m.observing = True
    n = 0
    try:
        net.eval()
        with torch.no_grad():
            for x in _batches(cfg.calibrate, cfg.batches):
                x = x.to(device)
                net(x.float() / 255.0 if x.dtype == torch.uint8 else x)
                n += 1
    finally:
        for m in layers:
            m.observing = False
        net.train(was_training)
    if n == 0:
        raise ConfigError("calibrate= yielded no batches; pass at least one Tensor[B, 3, H, W]")
    for m in layers:
        m.set_input_scale_from_observer()
    return n


def quantize_model(model: Any, overrides: Mapping[str, Any]) -> QuantState:
    """Quantize ``model`` (a Family or an nn.Module) in place; see :class:`QuantConfig` for keys.

    A simulated model can be finalized later with ``quantize(finalize=True)`` (same recipe).

    Example:
        >>> net = nn.Sequential(nn.Conv2d(3, 8, 3), nn.ReLU())
        >>> state = quantize_model(net, {"recipe": "fp8", "calibrate": torch.rand(2, 3, 16, 16)})
        >>> state.modules
        ['0']
    """
    cfg = QuantConfig.build(overrides)
    net = _net(model)
    state: QuantState | None = getattr(model, "quant", None)
    if state is not None:
        if cfg.finalize and not state.finalized and RECIPES[cfg.recipe] == state.format \
                and cfg.calibrate is None and not cfg.exclude:
            _finalize(net, state)
            return state
        raise ConfigError(
            f"the model is already quantized (recipe {state.recipe!r}, finalized={state.finalized}); "
            "call dequantize() first, or quantize(recipe=<same>, finalize=True) to finalize it"
        )
    fmt = get_format(RECIPES[cfg.recipe]).name
    state = QuantState(recipe=cfg.recipe, format=fmt)
    layers: list[QuantConv2d | QuantLinear] = []
    for name, m in list(net.named_modules()):
        if type(m) not in (nn.Conv2d, nn.Linear):
            continue
        if any(fnmatch.fnmatchcase(name, p) for p in cfg.exclude):
            state.excluded.append(name)
            continue
        q = (QuantConv2d if isinstance(m, nn.Conv2d) else QuantLinear).from_float(m, fmt=fmt)  # type: ignore[arg-type]
        if name:
            _set_module(net, name, q)
        else:
            raise ConfigError("the network itself is a single Conv2d/Linear; wrap it in an nn.Sequential")
        layers.append(q)
        state.modules.append(name)
    if not layers:
        raise ConfigError("nothing to quantize: the network has no nn.Conv2d / nn.Linear outside `exclude`")
    if cfg.calibrate is not None:
        state.calibration_batches = _calibrate(net, layers, cfg)
    else:
        logger.info("quantize(%s): no calibration data, weights only (activations stay float)", cfg.recipe)
    if cfg.finalize:
        _finalize(net, state)
    _attach(model, state)
    logger.info("quantized %d layers (%s%s)", len(layers), cfg.recipe, ", finalized" if cfg.finalize else "")
    return state


def _finalize(net: nn.Module, state: QuantState) -> None:
    for name, m in list(net.named_modules()):
        if isinstance(m, QuantConv2d):
            _set_module(net, name, PackedConv2d(m))
        elif isinstance(m, QuantLinear):
            _set_module(net, name, PackedLinear(m))
    state.finalized = True


def _attach(model: Any, state: QuantState | None) -> None:
    try:
        model.quant = state
    except AttributeError as e:  # pragma: no cover - exotic module types
        raise ConfigError(f"cannot record quantization state on {type(model).__name__}") from e


def dequantize_model(model: Any) -> None:
    """Put float ``nn.Conv2d`` / ``nn.Linear`` layers back (no-op for a float model).

    Simulated layers give back their original float parameters; finalized layers give their
    unpacked (quantized-valued) weights, because the float originals were not kept.
    """
    net = _net(model)
    n = 0
    for name, m in list(net.named_modules()):
        if isinstance(m, QUANT_TYPES + PACKED_TYPES):
            _set_module(net, name, m.to_float())
            n += 1
    if getattr(model, "quant", None) is not None or n:
        _attach(model, None)
    logger.info("dequantized %d layers", n)


def quant_info(model: Any) -> dict[str, Any]:
    """``{"quantized": bool, "recipe", "format", "finalized", "calibration_batches", "modules",
    "excluded", "kernels": {slot: implementation}}`` for ``model``."""
    state: QuantState | None = getattr(model, "quant", None)
    slots = ("fake_quant_fp8", "fake_quant_int8", "fp8_gemm", "unpack_weights")
    act = registry.active()
    info: dict[str, Any] = {"quantized": state is not None,
                            "kernels": {s: act.get(s, "unavailable") for s in slots}}
    if state is not None:
        info.update(asdict(state))
        info["activations"] = state.calibration_batches > 0
        info["modules"] = len(state.modules)
        info["excluded"] = list(state.excluded)
    return info


def quant_metadata(model: Any) -> dict[str, Any] | None:
    """What a checkpoint must record to rebuild the quantized structure (None for a float model).

    ``{"recipe", "finalized", "activations", "excluded"}``: enough for :func:`restore_quant_structure`
    to recreate the same layers, into which the saved state dict then loads strictly.
    """
    state: QuantState | None = getattr(model, "quant", None)
    if state is None:
        return None
    return {"recipe": state.recipe, "finalized": state.finalized,
            "activations": state.calibration_batches > 0, "excluded": list(state.excluded)}


def restore_quant_structure(model: Any, meta: Mapping[str, Any]) -> QuantState:
    """Recreate the quantized layers recorded by :func:`quant_metadata` on a freshly built float
    model, before its checkpoint state dict is loaded (scales and packed weights come from the
    state dict; no calibration runs)."""
    try:
        recipe, finalized = meta["recipe"], bool(meta["finalized"])
        activations, excluded = bool(meta["activations"]), [str(n) for n in meta["excluded"]]
    except (KeyError, TypeError) as e:
        raise ConfigError(f"malformed quantization metadata {meta!r}: {e}") from e
    state = quantize_model(model, {"recipe": recipe, "exclude": tuple(excluded)})
    net = _net(model)
    for m in net.modules():
        if isinstance(m, QUANT_TYPES):
            m.quant_input = activations
    state.calibration_batches = 1 if activations else 0
    if finalized:
        _finalize(net, state)
    return state
