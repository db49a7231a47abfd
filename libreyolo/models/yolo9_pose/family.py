"""YOLOv9 pose family (task ``pose``): the GELAN detector with a keypoint branch; sizes t, s.
Weights names: ``LibreYOLO9pose<size>-pose.pt``. The keypoint count comes from the data
(``kpt_shape`` of the dataset yaml; 17 by default) and is an architecture option."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, ClassVar

from torch import Tensor, nn

from .._gelan.family import GELANFamily
from .nn import NKPT


class YOLO9Pose(GELANFamily):
    FAMILY: ClassVar[str] = "yolo9_pose"
    NAME_TOKEN: ClassVar[str] = "YOLO9pose"
    TASKS: ClassVar[tuple[str, ...]] = ("pose",)
    OUTPUT_KIND: ClassVar[str] = "keypoints"  # postprocess: Tensor[n, 6 + 3 * nkpt] per image
    SIZES: ClassVar[tuple[str, ...]] = ("t", "s")
    LOSS_NAMES: ClassVar[tuple[str, ...]] = ("box", "pose", "kobj", "cls", "dfl")
    OUTPUT_NAMES: ClassVar[tuple[str, ...]] = ("raw_p3", "raw_p4", "raw_p5")
    DECODE_TOPK: ClassVar[int] = 0  # no captured decode: the keypoints travel with the eager NMS
    SUPPORTS_CUDA_GRAPH: ClassVar[bool] = True  # docs/cuda-graph-parity.json (58331d9: every row bitwise)
    INFER_CHANNELS_LAST: ClassVar[bool] = True  # benchmarks/results/layout/layout_predict.json (f71707c): graph step cl / nchw below 0.97
    GRAPH_BIAS_ACT: ClassVar[bool] = True  # benchmarks/results/layout/layout_predict.json (f71707c); parity rows regenerated with it
    SUPPORTS_TRAIN_CUDA_GRAPH: ClassVar[bool] = True  # docs/cuda-graph-training-parity.json

    @classmethod
    def build_net(cls, *, size: str, nc: int, task: str, box_groups: int = 4, nkpt: int = NKPT,
                  skeleton: list[list[int]] | None = None) -> nn.Module:
        """The network; ``skeleton`` (pairs of keypoint indices, for drawing) is kept on it."""
        from .nn import build_yolo9_pose

        net = build_yolo9_pose(size=size, nc=nc, nkpt=nkpt, box_groups=box_groups)
        net.skeleton = [list(map(int, p)) for p in skeleton] if skeleton else None  # type: ignore[assignment]
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
        ``box_groups`` when 1 (Ultralytics' head), ``skeleton`` when the training data gave one."""
        out: dict[str, Any] = {}
        g = int(getattr(self.net.head, "box_groups", 4))
        if g != 4:
            out["box_groups"] = g
        if self.nkpt != NKPT:
            out["nkpt"] = self.nkpt
        if self.skeleton:
            out["skeleton"] = self.skeleton
        return out

    def set_arch(self, *, box_groups: int = 4, nkpt: int = NKPT, skeleton: list[list[int]] | None = None) -> None:
        """Rebuild the network with these options when they differ (untrained weights; load them
        afterwards); a new ``skeleton`` alone is only recorded."""
        if box_groups == int(getattr(self.net.head, "box_groups", 4)) and nkpt == self.nkpt:
            self.net.skeleton = [list(map(int, p)) for p in skeleton] if skeleton else None  # type: ignore[assignment]
            return
        device = self.device
        self.net = self.build_net(size=self.size, nc=self.nc, task=self.task, box_groups=box_groups, nkpt=nkpt,
                                  skeleton=skeleton).to(device).eval()

    @classmethod
    def postprocess_fn(cls) -> Callable[..., list[Tensor]]:
        """Detections with their keypoints (:func:`.postprocess.postprocess`)."""
        from .postprocess import postprocess

        return postprocess

    def build_criterion(self) -> Any:
        from .loss import YOLO9PoseLoss

        return YOLO9PoseLoss(self.net)
