"""A tiny stand-in Family for CPU tests of the graph runner (not a registered family)."""

from __future__ import annotations

from typing import Any, ClassVar

import torch
from torch import nn

from libreyolo.graphs.seam import Stage
from libreyolo.models._base.family import Family


class TinyNet(nn.Module):
    def __init__(self, nc: int) -> None:
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 8, 3, 2, 1), nn.BatchNorm2d(8), nn.SiLU())
        self.head = nn.Conv2d(8, 4 + nc, 1)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        f = self.stem(x)
        return self.head(f), f.mean(dim=(2, 3))


class TinyFamily(Family):
    FAMILY: ClassVar[str] = "tiny"
    NAME_TOKEN: ClassVar[str] = "TINY"
    SIZES: ClassVar[tuple[str, ...]] = ("n",)
    DEFAULT_IMGSZ: ClassVar[int] = 64
    SUPPORTS_CUDA_GRAPH: ClassVar[bool] = True

    @classmethod
    def build_net(cls, *, size: str, nc: int, task: str) -> nn.Module:
        return TinyNet(nc)

    def postprocess(self, raw: Any, **kw: Any) -> list[torch.Tensor]:
        return [torch.zeros(0, 6) for _ in range(raw[0].shape[0])]


class TinyUnflagged(TinyFamily):
    FAMILY: ClassVar[str] = "tiny_unflagged"
    SUPPORTS_CUDA_GRAPH: ClassVar[bool] = False
    CUDA_GRAPH_REASON: ClassVar[str] = "no parity run"


class TinySeamed(TinyFamily):
    """Stem captured, a host-syncing stage eager, head captured."""

    FAMILY: ClassVar[str] = "tiny_seamed"

    def forward_stages(self) -> list[Stage]:
        net = self.net
        return [
            Stage(name="stem", fn=net.stem),
            Stage(name="rescale", fn=lambda f: f * float(f.abs().amax().clamp_min(1e-6).reciprocal()),
                  capturable=False, reason="host sync (.item())"),
            Stage(name="head", fn=lambda f: (net.head(f), f.mean(dim=(2, 3)))),
        ]
