"""YOLO-NAS-Pose family (task ``pose``): the YOLO-NAS trunk with per-level pose heads; sizes n,
s, m, l. Weights names: ``LibreYOLONASPose<size>-pose.pt`` (a token of its own: ``YOLONAS`` is
the detector's). The keypoint count comes from the data (``kpt_shape`` of the dataset yaml; 17
by default) and is an architecture option."""

from __future__ import annotations

from typing import Any, ClassVar

from torch import nn

from .._base.dense import DenseFamily
from .nn import NKPT


class YOLONASPose(DenseFamily):
    """YOLO-NAS-Pose (Deci, 2023; super-gradients): the YOLO-NAS QARepVGG backbone and PAN neck
    (:mod:`libreyolo.models._yolonas`), per level a class/box branch (DFL boxes, 17 bins) and a
    separate pose branch (x, y per keypoint; the visibility logits come out of the class conv).
    :meth:`fuse` (done by ``predict``) merges every QARepVGG block into one 3x3 conv.

    Example:
        >>> from libreyolo.models.yolonas_pose.nn import reference_param_count
        >>> model = YOLONASPose(size="n", nc=1)
        >>> round(reference_param_count(model.net) / 1e6, 2)  # published 9.9M (super-gradients' count)
        9.9
    """

    FAMILY: ClassVar[str] = "yolonas_pose"
    NAME_TOKEN: ClassVar[str] = "YOLONASPose"
    TASKS: ClassVar[tuple[str, ...]] = ("pose",)
    OUTPUT_KIND: ClassVar[str] = "keypoints"  # postprocess: Tensor[n, 6 + 3 * nkpt] per image
    SIZES: ClassVar[tuple[str, ...]] = ("n", "s", "m", "l")
    LOSS_NAMES: ClassVar[tuple[str, ...]] = ("box", "pose", "kobj", "cls", "dfl")
    DECODE_TOPK: ClassVar[int] = 0  # no captured decode: the keypoints travel with the eager NMS
    SUPPORTS_CUDA_GRAPH: ClassVar[bool] = True  # docs/cuda-graph-parity.json
    SUPPORTS_TRAIN_CUDA_GRAPH: ClassVar[bool] = True  # docs/cuda-graph-training-parity.json
    # Taken from YOLO-NAS (the same trunk), not measured for this family: with randomised BatchNorm
    # statistics YOLO-NAS' untrained probe output barely depends on its input, so the probes calibrate them.
    PARITY_NORM_STATS: ClassVar[str] = "calibrated"

    @classmethod
    def build_net(cls, *, size: str, nc: int, task: str, nkpt: int = NKPT,
                  skeleton: list[list[int]] | None = None) -> nn.Module:
        """The network; ``skeleton`` (pairs of keypoint indices, for drawing) is kept on it."""
        from .nn import build_yolonas_pose

        net = build_yolonas_pose(size=size, nc=nc, nkpt=nkpt)
        net.skeleton = [list(map(int, p)) for p in skeleton] if skeleton else None
        return net

    @property
    def nkpt(self) -> int:
        return int(self.net.nkpt)

    @property
    def skeleton(self) -> list[list[int]] | None:
        return getattr(self.net, "skeleton", None)

    @property
    def arch(self) -> dict[str, Any]:
        """Architecture options beyond the size (saved in checkpoints): ``nkpt`` when not 17,
        ``skeleton`` when the training data gave one."""
        out: dict[str, Any] = {}
        if self.nkpt != NKPT:
            out["nkpt"] = self.nkpt
        if self.skeleton:
            out["skeleton"] = self.skeleton
        return out

    def set_arch(self, *, nkpt: int = NKPT, skeleton: list[list[int]] | None = None) -> None:
        """Rebuild the network for ``nkpt`` keypoints when it differs (untrained weights; load them
        afterwards); a new ``skeleton`` alone is only recorded."""
        if nkpt == self.nkpt:
            self.net.skeleton = [list(map(int, p)) for p in skeleton] if skeleton else None
            return
        device = self.device
        self.net = self.build_net(size=self.size, nc=self.nc, task=self.task, nkpt=nkpt,
                                  skeleton=skeleton).to(device).eval()

    def build_criterion(self) -> Any:
        from .loss import YOLONASPoseLoss

        return YOLONASPoseLoss(self.net)
