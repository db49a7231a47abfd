"""Map a super-gradients YOLO-NAS-Pose state dict onto :class:`~.nn.YOLONASPoseNet`.

Module names are the reference's (``YoloNASPoseDFLHead`` with ``shared_stem: False``: its
``stem`` is an identity, no tensors), so the keys map by the lineage's renaming rules
(:func:`libreyolo.models._yolonas.convert.rename_key`). The reference's BatchNorm eps (1e-6) is
ours. ``cls_pred`` holds ``nc`` class rows then one visibility row per keypoint
(``pose_conf_in_class_head: True``, the only layout the published arch files use); ``pose_pred``
holds ``(x, y)`` per keypoint. The reference model is single-class (``nc`` 1), which
:func:`infer_size_nc` reads back. A checkpoint whose head puts the confidences in ``pose_pred``
(3 per keypoint) is refused by the shape check, naming the tensor.
"""

from __future__ import annotations

from collections.abc import Mapping

from torch import Tensor

from ...errors import CheckpointError
from .._base.convert_rules import fit, rename_all
from .._yolonas.convert import STEM_KEY, rename_key, strip_module
from .._yolonas.variants import head_width
from .nn import VARIANTS

SOURCES = ("super_gradients",)
BOX_STEM_KEY = "heads.head1.bbox_stem.seq.conv.weight"
POSE_KEY = "heads.head1.pose_pred.weight"
CLS_KEY = "heads.head1.cls_pred.weight"

__all__ = ["SOURCES", "adapt_model", "convert_state_dict", "infer_size_nc", "match", "nkpt_of", "rename_key"]


def _plain(src: Mapping[str, Tensor]) -> dict[str, Tensor]:
    return {strip_module(k): v for k, v in src.items()}


def nkpt_of(src: Mapping[str, Tensor]) -> int:
    """Keypoints per object of a reference head: ``pose_pred`` outputs / 2."""
    w = _plain(src).get(POSE_KEY)
    if w is None:
        raise CheckpointError(f"not a YOLO-NAS-Pose state dict: no {POSE_KEY!r}.")
    return int(w.shape[0]) // 2


def infer_size_nc(src: Mapping[str, Tensor]) -> tuple[str, int]:
    """``(size, nc)``: the size from the stride-8 box stem's width (48, 64, 96, 128 for n, s, m,
    l), ``nc`` = class-conv outputs less one visibility logit per keypoint."""
    sd = _plain(src)
    if BOX_STEM_KEY not in sd or CLS_KEY not in sd or POSE_KEY not in sd:
        raise CheckpointError(f"not a YOLO-NAS-Pose state dict: no {BOX_STEM_KEY!r} / {CLS_KEY!r} / {POSE_KEY!r}.")
    width = int(sd[BOX_STEM_KEY].shape[0])
    nc = int(sd[CLS_KEY].shape[0]) - nkpt_of(sd)
    if nc < 1:
        raise CheckpointError(f"the class conv has {int(sd[CLS_KEY].shape[0])} outputs for {nkpt_of(sd)} keypoints: "
                              "only heads with the keypoint confidences in the class conv convert")
    for size, v in VARIANTS.items():
        if head_width(v.bbox_inter[0], v.width_mult) == width:
            return size, nc
    raise CheckpointError(f"this YOLO-NAS-Pose (stride-8 head width {width}) matches none of the sizes "
                          f"{', '.join(VARIANTS)}.")


def convert_state_dict(src: Mapping[str, Tensor], own: Mapping[str, Tensor], *, arch: str = "") -> dict[str, Tensor]:
    """Reference state dict -> a complete state dict for a network whose ``state_dict()`` is
    ``own``; raises :class:`CheckpointError` naming the first key that does not fit."""
    return fit(rename_all(src, rename_key), own)


def match(fw: object) -> tuple[str, int] | None:
    """``(size, nc)`` when ``fw`` (:class:`~libreyolo.convert.ForeignWeights`) holds a YOLO-NAS
    state dict with pose heads (a QARepVGG stem and a ``pose_pred`` conv)."""
    sd: Mapping[str, Tensor] = getattr(fw, "state_dict", {})
    if not any(k.endswith(STEM_KEY) for k in sd) or not any(k.endswith(POSE_KEY) for k in sd):
        return None
    return infer_size_nc(sd)


def adapt_model(model: object, fw: object) -> None:
    """Build the head for the weights' keypoint count."""
    model.set_arch(nkpt=nkpt_of(getattr(fw, "state_dict", {})))  # type: ignore[attr-defined]
