"""YOLO-NAS-Pose raw outputs -> detections with their keypoints (eager; never captured).

The head output has the dense-pose layout of :mod:`libreyolo.models._gelan.pose`, so decoding
is that module's (:func:`~libreyolo.models._gelan.pose.postprocess_pose`): DFL boxes over 17
bins and sigmoid class scores as the YOLO-NAS detector, best class per anchor, ``conf`` filter,
NMS, ``max_det``; each kept anchor's keypoints ``(raw + cell) * stride`` (``net.kpt_scale`` 1)
and sigmoid visibilities, the decode of super-gradients' ``YoloNASPoseNDFLHeads``. Upstream's
``YoloNASPosePostPredictionCallback`` keeps the top ``pre_nms_max_predictions`` anchors first and
runs class-agnostic NMS on its one class; here ``max_candidates`` and the ``agnostic`` option do.
"""

from __future__ import annotations

from torch import Tensor, nn

from .._gelan.pose import MAX_CANDIDATES, postprocess_pose

__all__ = ["MAX_CANDIDATES", "postprocess"]


def postprocess(raw: list[Tensor] | tuple[Tensor, ...], *, net: nn.Module, conf: float, iou: float,
                classes: list[int] | None, max_det: int, agnostic: bool,
                max_candidates: int = MAX_CANDIDATES) -> list[Tensor]:
    """raw (the network output: three levels) -> per image Tensor[n, 6 + 3 * nkpt] float32: x1, y1,
    x2, y2 (network-input pixels), score, class id, then per keypoint x, y (input pixels) and its
    visibility probability; rows by decreasing score, ``n <= max_det``.

    Example:
        >>> from libreyolo.models.yolonas_pose.nn import build_yolonas_pose
        >>> net = build_yolonas_pose(size="n", nc=1, nkpt=4).eval()
        >>> with torch.no_grad():
        ...     dets = postprocess(net(torch.rand(1, 3, 64, 64)), net=net, conf=0.0, iou=0.7, classes=None,
        ...                        max_det=5, agnostic=False)
        >>> dets[0].shape
        torch.Size([5, 18])
    """
    return postprocess_pose(raw, net=net, conf=conf, iou=iou, classes=classes, max_det=max_det, agnostic=agnostic,
                            max_candidates=max_candidates, name="YOLO-NAS-Pose")
