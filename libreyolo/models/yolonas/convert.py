"""Map a super-gradients YOLO-NAS state dict onto :class:`~libreyolo.models.yolonas.nn.YOLONASNet`.

Our module names are the reference's (``backbone.stem.conv.branch_3x3.conv.weight``,
``neck.neck1.reduce_skip1.conv.weight``, ``heads.head1.cls_pred.bias``, ...), so the mapping is
four rules:

- a leading ``module.`` (a checkpoint saved from DataParallel / DDP) is removed;
- ``rbr_reparam.*`` is dropped: the trainable QARepVGG block of the reference carries an unused
  merged-kernel conv beside its branches; ours creates it only in ``fuse()``;
- the head's ``ConvBNReLU`` wraps its layers in ``seq`` (``stem.seq.conv`` -> ``stem.conv``);
- the SPP context module's ``cv1`` / ``cv2`` are our ``conv1`` / ``conv2``.

BatchNorm eps is 1e-3 in both (the reference's ``bn_eps``), so tensors are copied unchanged. A
checkpoint saved after the reference's ``prep_model_for_conversion`` (branches merged) has no
``branch_3x3`` keys and is refused, naming the first tensor it lacks.
"""

from __future__ import annotations

from collections.abc import Mapping

from torch import Tensor

from ...errors import CheckpointError
from .._base.convert_rules import fit, rename_all
from .._yolonas.variants import VARIANTS
from .nn import head_width

SOURCES = ("super_gradients",)
STEM_KEY = "backbone.stem.conv.branch_3x3.conv.weight"
HEAD_STEM_KEY = "heads.head1.stem.seq.conv.weight"
CLS_KEY = "heads.head1.cls_pred.weight"


def rename_key(key: str) -> str | None:
    """Our name for one reference key, or ``None`` for a key we drop.

    Example:
        >>> rename_key("heads.head2.reg_convs.0.seq.bn.weight")
        'heads.head2.reg_convs.0.bn.weight'
        >>> rename_key("module.backbone.context_module.cv1.conv.weight")
        'backbone.context_module.conv1.conv.weight'
        >>> rename_key("backbone.stage1.downsample.rbr_reparam.weight") is None
        True
    """
    if key.startswith("module."):
        key = key[len("module."):]
    if ".rbr_reparam." in key or key.endswith((".id_tensor", "proj_conv", "anchor_points", "stride_tensor")):
        return None
    key = key.replace(".seq.", ".")
    key = key.replace("context_module.cv1.", "context_module.conv1.").replace("context_module.cv2.",
                                                                              "context_module.conv2.")
    return key


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
    if not any(k.endswith(STEM_KEY) for k in sd) or not any(k.endswith(CLS_KEY) for k in sd):
        return None
    return infer_size_nc(sd)
