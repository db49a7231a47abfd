"""timm ``convnext_atto`` / ``convnext_tiny`` weights onto our ConvNeXt (torchvision layout).

Renames: ``stem.{0,1}`` -> ``features.0.{0,1}``; ``stages.<i>.downsample.{0,1}`` ->
``features.<2i>.{0,1}``; ``stages.<i>.blocks.<j>`` -> ``features.<2i+1>.<j>`` with ``conv_dw`` ->
``block.0``, ``norm`` -> ``block.2``, ``mlp.fc1`` -> ``block.3``, ``mlp.fc2`` -> ``block.5``,
``gamma`` -> ``layer_scale``; ``head.norm`` -> ``classifier.0``, ``head.fc`` -> ``classifier.2``.
timm's atto keeps its MLP as 1x1 convs (``conv_mlp``): those kernels are reshaped to linear
weights, the same numbers. LayerNorm eps is 1e-6 on both sides.
"""

from __future__ import annotations

from collections.abc import Mapping

from torch import Tensor

from .._base.convert_rules import KeyRule, base_arch, fit, rename_all, rename_by_rules

SOURCES = ("timm",)
ARCHS = {"convnext_atto": "atto", "convnext_tiny": "tiny"}
_BLOCK = {"conv_dw": "block.0", "norm": "block.2", "mlp.fc1": "block.3", "mlp.fc2": "block.5"}
_RULES: tuple[KeyRule, ...] = (
    (r"stem\.([01])\.(\w+)", lambda m: f"body.features.0.{m[1]}.{m[2]}"),
    (r"stages\.(\d+)\.downsample\.([01])\.(\w+)", lambda m: f"body.features.{2 * int(m[1])}.{m[2]}.{m[3]}"),
    (r"stages\.(\d+)\.blocks\.(\d+)\.gamma", lambda m: f"body.features.{2 * int(m[1]) + 1}.{m[2]}.layer_scale"),
    (r"stages\.(\d+)\.blocks\.(\d+)\.(conv_dw|norm|mlp\.fc1|mlp\.fc2)\.(\w+)",
     lambda m: f"body.features.{2 * int(m[1]) + 1}.{m[2]}.{_BLOCK[m[3]]}.{m[4]}"),
    (r"head\.(norm|fc)\.(\w+)", lambda m: f"body.classifier.{0 if m[1] == 'norm' else 2}.{m[2]}"),
)


def match(fw: object) -> tuple[str, int] | None:
    size = ARCHS.get(base_arch(str(getattr(fw, "arch", ""))))
    if size is None:
        return None
    return size, int(fw.state_dict["head.fc.weight"].shape[0])  # type: ignore[attr-defined]


def rename_key(k: str) -> str:
    """Our name for one timm ConvNeXt key (module docstring).

    Example:
        >>> rename_key("stages.2.blocks.4.mlp.fc1.weight")
        'body.features.5.4.block.3.weight'
    """
    return rename_by_rules(k, _RULES, what="a timm ConvNeXt")


def convert_state_dict(src: Mapping[str, Tensor], own: Mapping[str, Tensor], *, arch: str = "") -> dict[str, Tensor]:
    """timm ConvNeXt state dict -> ours (first misfit named)."""
    return fit(rename_all(src, rename_key), own)
