"""YOLOv9 (GELAN) detection family: sizes t, s, m, c."""

from __future__ import annotations

from typing import Any, ClassVar

from torch import Tensor, nn

from .._base.dense import DenseFamily


class YOLO9(DenseFamily):
    FAMILY: ClassVar[str] = "yolo9"
    NAME_TOKEN: ClassVar[str] = "YOLO9"
    SIZES: ClassVar[tuple[str, ...]] = ("t", "s", "m", "c")
    LOSS_NAMES: ClassVar[tuple[str, ...]] = ("box", "cls", "dfl")
    SUPPORTS_CUDA_GRAPH: ClassVar[bool] = True  # docs/cuda-graph-parity.json
    SUPPORTS_TRAIN_CUDA_GRAPH: ClassVar[bool] = True  # docs/cuda-graph-training-parity.json
    INFER_CHANNELS_LAST: ClassVar[bool] = True  # benchmarks/results/peer (graph step fp16 and fp32)
    DECODE_TOPK: ClassVar[int] = 1000

    @classmethod
    def build_net(cls, *, size: str, nc: int, task: str, box_groups: int = 4) -> nn.Module:
        from .nn import build_yolo9

        return build_yolo9(size=size, nc=nc, box_groups=box_groups)

    @property
    def arch(self) -> dict[str, Any]:
        """Architecture options beyond the size (saved in checkpoints): ``{"box_groups": 1}`` for a
        model converted from an Ultralytics YOLOv9 checkpoint, whose box branch is ungrouped."""
        g = int(getattr(self.net.head, "box_groups", 4))
        return {} if g == 4 else {"box_groups": g}

    def set_arch(self, *, box_groups: int = 4) -> None:
        """Rebuild the network with ``box_groups`` (untrained weights; load them afterwards). On a
        model whose graphs were captured, call ``model.invalidate_graphs(...)`` after it."""
        if box_groups == int(getattr(self.net.head, "box_groups", 4)):
            return
        device = self.device
        self.net = self.build_net(size=self.size, nc=self.nc, task=self.task, box_groups=box_groups).to(device).eval()

    def decode(self, raw: Any) -> Tensor:
        from ...ops.anchors import make_anchors
        from .postprocess import decode

        feats = list(raw)
        return decode(feats, net=self.net, k=self.DECODE_TOPK, anchors=self._per_level("anchors", feats, make_anchors))

    def build_criterion(self) -> Any:
        from .loss import YOLO9Loss

        return YOLO9Loss(self.net)
