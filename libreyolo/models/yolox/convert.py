"""Official YOLOX weights (Megvii-BaseDetection/YOLOX, ``yolox_{nano,tiny,s,m,l,x}.pth``) onto our
YOLOX: the tensor names are the reference's (``backbone.backbone.dark2...``, ``head.cls_preds...``),
so conversion only checks that every tensor fits."""

from __future__ import annotations

from collections.abc import Mapping

from torch import Tensor

from ...errors import CheckpointError
from .._base.convert_rules import fit, rename_all
from .variants import VARIANTS

SOURCES = ("yolox",)


def match(fw: object) -> tuple[str, int] | None:
    """``(size, nc)`` from the stem width and whether the head is depthwise (nano)."""
    sd: Mapping[str, Tensor] = getattr(fw, "state_dict", {})
    if "backbone.backbone.stem.conv.conv.weight" not in sd:
        return None
    width = int(sd["backbone.backbone.stem.conv.conv.weight"].shape[0])
    depthwise = "head.cls_convs.0.0.dconv.conv.weight" in sd
    nc = int(sd["head.cls_preds.0.weight"].shape[0])
    for size, v in VARIANTS.items():
        if v.base_channels == width and v.depthwise == depthwise:
            return size, nc
    raise CheckpointError(f"this YOLOX (stem width {width}, depthwise {depthwise}) matches none of the sizes "
                          f"{', '.join(VARIANTS)}.")


def convert_state_dict(src: Mapping[str, Tensor], own: Mapping[str, Tensor], *, arch: str = "") -> dict[str, Tensor]:
    """Official YOLOX state dict -> ours (same names; first misfit named)."""
    return fit(rename_all(src, lambda k: k), own)
