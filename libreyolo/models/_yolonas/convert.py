"""super-gradients key names -> the YOLO-NAS lineage's (detection and pose heads alike).

Our module names are the reference's (``backbone.stem.conv.branch_3x3.conv.weight``,
``neck.neck1.reduce_skip1.conv.weight``, ``heads.head1.cls_pred.bias``, ...), so the mapping is
four rules:

- a leading ``module.`` (a checkpoint saved from DataParallel / DDP) is removed;
- ``rbr_reparam.*`` is dropped: the trainable QARepVGG block of the reference carries an unused
  merged-kernel conv beside its branches; ours creates it only in ``fuse()``;
- the head's ``ConvBNReLU`` wraps its layers in ``seq`` (``stem.seq.conv`` -> ``stem.conv``);
- the SPP context module's ``cv1`` / ``cv2`` are our ``conv1`` / ``conv2``.
"""

from __future__ import annotations

STEM_KEY = "backbone.stem.conv.branch_3x3.conv.weight"


def strip_module(key: str) -> str:
    """``key`` without a leading ``module.`` (DataParallel / DDP)."""
    return key[len("module."):] if key.startswith("module.") else key


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
    key = strip_module(key)
    if ".rbr_reparam." in key or key.endswith((".id_tensor", "proj_conv", "anchor_points", "stride_tensor")):
        return None
    key = key.replace(".seq.", ".")
    key = key.replace("context_module.cv1.", "context_module.conv1.").replace("context_module.cv2.",
                                                                              "context_module.conv2.")
    return key
