"""The family base of the YOLOv9 (GELAN) lineage: captured decode and training criterion from the
shared modules; :class:`BoxGroupsArch` adds the ``box_groups`` head option (Ultralytics weights)."""

from __future__ import annotations

from typing import Any, ClassVar

from torch import Tensor

from .._base.dense import DenseFamily


class GELANFamily(DenseFamily):
    """A GELAN dense detector whose network returns one ``Tensor[B, 4 * reg_max + nc, h, w]`` per
    level of ``net.strides``; postprocess (:mod:`.postprocess`) is found beside this class."""

    LOSS_NAMES: ClassVar[tuple[str, ...]] = ("box", "cls", "dfl")
    DECODE_TOPK: ClassVar[int] = 1000

    def decode(self, raw: Any) -> Tensor:
        from ...ops.anchors import make_anchors
        from .postprocess import decode

        feats = list(raw)
        return decode(feats, net=self.net, k=self.DECODE_TOPK, anchors=self._per_level("anchors", feats, make_anchors))

    def build_criterion(self) -> Any:
        from .loss import YOLO9Loss

        return YOLO9Loss(self.net)


class BoxGroupsArch:
    """Mixin for a family whose ``build_net`` takes ``box_groups`` (4: the original YOLOv9
    ``DDetect`` head, the default; 1: Ultralytics' ungrouped ``Detect`` box branch)."""

    net: Any
    size: str
    nc: int
    task: str
    device: Any

    @property
    def arch(self) -> dict[str, Any]:
        """Architecture options beyond the size (saved in checkpoints): ``{"box_groups": 1}`` for a
        model converted from an Ultralytics checkpoint, whose box branch is ungrouped."""
        g = int(getattr(self.net.head, "box_groups", 4))
        return {} if g == 4 else {"box_groups": g}

    def set_arch(self, *, box_groups: int = 4) -> None:
        """Rebuild the network with ``box_groups`` (untrained weights; load them afterwards). On a
        model whose graphs were captured, call ``model.invalidate_graphs(...)`` after it."""
        if box_groups == int(getattr(self.net.head, "box_groups", 4)):
            return
        device = self.device
        self.net = self.build_net(size=self.size, nc=self.nc, task=self.task,  # type: ignore[attr-defined]
                                  box_groups=box_groups).to(device).eval()
