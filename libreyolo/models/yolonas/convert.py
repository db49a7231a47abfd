"""Map a super-gradients YOLO-NAS state dict onto :class:`~libreyolo.models.yolonas.nn.YOLONASNet`.

Our module names are the reference's, so the mapping is the lineage's four renaming rules
(:func:`libreyolo.models._yolonas.convert.rename_key`, shared with yolonas_pose).

BatchNorm eps is 1e-3 in both (the reference's ``bn_eps``), so tensors are copied unchanged. A
checkpoint saved after the reference's ``prep_model_for_conversion`` (branches merged) has no
``branch_3x3`` keys and is refused, naming the first tensor it lacks.
"""

from __future__ import annotations

from collections.abc import Mapping

from torch import Tensor

from ...errors import CheckpointError
from .._base.convert_rules import fit, rename_all
from .._yolonas.convert import STEM_KEY, rename_key
from .._yolonas.variants import VARIANTS
from .nn import head_width

SOURCES = ("super_gradients",)
__all__ = ["SOURCES", "convert_state_dict", "infer_size_nc", "match", "rename_key"]
HEAD_STEM_KEY = "heads.head1.stem.seq.conv.weight"
CLS_KEY = "heads.head1.cls_pred.weight"


def infer_size_nc(src: Mapping[str, Tensor]) -> tuple[str, int]:
    """``(size, nc)`` of a reference state dict: the size from the stride-8 head's width (64, 96,
    128 for s, m, l), ``nc`` from its class conv."""
    sd = {k[len("module."):] if k.startswith("module.") else k: v for k, v in src.items()}
    if HEAD_STEM_KEY not in sd or CLS_KEY not in sd:
        raise CheckpointError(f"not a YOLO-NAS state dict: no {HEAD_STEM_KEY!r} / {CLS_KEY!r}.")
    width = int(sd[HEAD_STEM_KEY].shape[0])
    nc = int(sd[CLS_KEY].shape[0])
    for size, v in VARIANTS.items():
        if head_width(v.head_inter[0], v.head_width_mult) == width:
            return size, nc
    raise CheckpointError(f"this YOLO-NAS (stride-8 head width {width}) matches none of the sizes {', '.join(VARIANTS)}.")


def convert_state_dict(src: Mapping[str, Tensor], own: Mapping[str, Tensor], *, arch: str = "") -> dict[str, Tensor]:
    """Reference state dict -> a complete state dict for a network whose ``state_dict()`` is
    ``own``; raises :class:`CheckpointError` naming the first key that does not fit."""
    return fit(rename_all(src, rename_key), own)


def match(fw: object) -> tuple[str, int] | None:
    """``(size, nc)`` when ``fw`` (:class:`~libreyolo.convert.ForeignWeights`) holds a YOLO-NAS
    detection state dict (a QARepVGG stem and NDFL heads)."""
    sd: Mapping[str, Tensor] = getattr(fw, "state_dict", {})
    if not all(any(k.endswith(key) for k in sd) for key in (STEM_KEY, CLS_KEY, HEAD_STEM_KEY)):
        return None  # (a YOLO-NAS-Pose head has no shared stem: yolonas_pose reads it)
    return infer_size_nc(sd)
