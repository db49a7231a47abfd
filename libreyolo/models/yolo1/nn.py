"""YOLOv1 detection networks: a conv stack, then fully connected layers that predict the whole
``S x S`` grid at once (S = 7), each cell ``B`` boxes (x, y, sqrt w, sqrt h, confidence) and ``C``
class probabilities shared by its boxes.

Sizes (layer lists in :data:`SPECS`):

- ``b``: the paper's network (arXiv:1506.02640, Figure 3): 24 convs (7x7/2 64, max-pool, 3x3 192,
  max-pool, 1x1 128, 3x3 256, 1x1 256, 3x3 512, max-pool, (1x1 256, 3x3 512) x 4, 1x1 512, 3x3 1024,
  max-pool, (1x1 512, 3x3 1024) x 2, 3x3 1024, 3x3/2 1024, 3x3 1024, 3x3 1024), a 4096-wide fully
  connected layer (LeakyReLU, dropout 0.5) and the linear output layer; B = 2.
- ``darknet``: the released ``yolov1.cfg``: the same 24 convs, then a 3x3 locally connected layer
  of 256 filters (``[local]``, LeakyReLU), dropout 0.5 and the linear ``[connected]`` output; B = 3.
- ``tiny``: ``yolov1-tiny.cfg``: 3x3 convs 16, 32, 64, 128, 256, 512 each followed by a max-pool,
  3x3 1024, 3x3 256, the linear ``[connected]`` output; B = 2.

Every conv is conv + BatchNorm + LeakyReLU(0.1) (``batch_normalize=1`` as in both released cfgs;
the 2015 paper's convs had a bias and no BatchNorm, which is exactly what :meth:`YOLO1Net.fuse`
leaves).

Contract: input Tensor[B, 3, N, N] float in [0, 1] RGB with ``N == net.input_size`` (448; the
head's input is the flattened S x S map). Another size is resized (bilinear) to ``input_size``
first, with a warning, so that callers that probe with small inputs still run; exporting at
another size is refused. Output, in train and eval mode alike, Tensor[B, S * S * (C + 5 B)] of
raw linear values in Darknet's ``[detection]`` order: ``S*S*C`` class probabilities (cell-major),
``S*S*B`` confidences, ``S*S*B*4`` boxes ``(x, y, sqrt w, sqrt h)`` (x, y offsets in the cell, w, h
relative to the image). Decoding: :mod:`.postprocess`.

Test-only architecture options (``width``, ``hidden``, ``input_size``) shrink the network for CPU
tests: channels scaled by ``width``, the 4096 FC width set by ``hidden``, and an ``input_size``
under 448 runs only the last ``floor(log2(input_size / S))`` of the six downsampling steps (the
earlier ones become stride 1) and, when the last map (``f x f``, ``f >= S``) is not S x S,
average-pools it to S x S (kernel ``f - S + 1``, stride 1; absent at the published sizes).
"""

from __future__ import annotations

import logging
import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ...errors import ConfigError, ExportError
from ...layers.conv import fuse_modules
from .._darknet.blocks import dconv
from .._darknet.local import LocallyConnected2d

logger = logging.getLogger(__name__)

S = 7
IMGSZ = 448
SIZES = ("tiny", "b", "darknet")  # smallest first, as the other families
BOXES = {"tiny": 2, "b": 2, "darknet": 3}
HIDDEN = 4096  # the paper's first fully connected layer
# conv rows (kernel, filters, stride) and "M" (2x2/2 max-pool), in cfg order
_PAPER = ([(7, 64, 2), "M", (3, 192, 1), "M", (1, 128, 1), (3, 256, 1), (1, 256, 1), (3, 512, 1), "M"]
          + [(1, 256, 1), (3, 512, 1)] * 4 + [(1, 512, 1), (3, 1024, 1), "M"] + [(1, 512, 1), (3, 1024, 1)] * 2
          + [(3, 1024, 1), (3, 1024, 2), (3, 1024, 1), (3, 1024, 1)])
_TINY = [(3, 16, 1), "M", (3, 32, 1), "M", (3, 64, 1), "M", (3, 128, 1), "M", (3, 256, 1), "M", (3, 512, 1), "M",
         (3, 1024, 1), (3, 256, 1)]
SPECS: dict[str, list] = {"b": _PAPER, "darknet": _PAPER, "tiny": _TINY}
LOCAL_FILTERS = 256  # yolov1.cfg's [local] layer
# Published / computed counts, 20 (VOC) classes: see the README ("Parameters").
PARAMS_20 = {"b": 271_716_734, "darknet": 197_301_875, "tiny": 27_095_374}  # unfused (BatchNorm terms included)
PARAMS_20_FUSED = {"b": 271_703_550, "darknet": 197_288_691, "tiny": 27_093_086}  # = conv + bias (the paper's b)
PAPER_PARAMS_M = {"b": 272.0}  # "about 272 M" for the paper's network (its 4096-wide FC holds 205.5 M)


def _ch(c: int, width: float) -> int:
    return max(1, int(round(c * width)))


class Conv(nn.Module):
    """The conv stack of a spec: x (Tensor[B, 3, N, N]) -> Tensor[B, c, N / d, N / d], ``d`` the
    product of the strides that run (64 at the published sizes)."""

    def __init__(self, spec: list, *, width: float, downsamples: int) -> None:
        super().__init__()
        steps = sum(1 for r in spec if r == "M" or r[2] == 2)
        drop = steps - downsamples  # the first `drop` downsampling steps become stride 1
        layers: list[nn.Module] = []
        c = 3
        for r in spec:
            if r == "M":
                if drop > 0:
                    drop -= 1
                    continue
                layers.append(nn.MaxPool2d(2, 2))
                continue
            k, co, st = r
            if st == 2 and drop > 0:
                drop, st = drop - 1, 1
            co = _ch(co, width)
            layers.append(dconv(c, co, k, st))
            c = co
        self.layers = nn.Sequential(*layers)
        self.c_out = c
        self.stride = 2 ** downsamples

    def forward(self, x: Tensor) -> Tensor:
        return self.layers(x)


class YOLO1Net(nn.Module):
    """YOLOv1; see the module docstring for the contract.

    Example:
        >>> net = build_yolo1(size="b", nc=20, width=1 / 16, hidden=32, input_size=64).eval()
        >>> net(torch.zeros(1, 3, 64, 64)).shape  # 7 * 7 * (20 + 5 * 2)
        torch.Size([1, 1470])
    """

    family_name = "yolo1"

    def __init__(self, *, nc: int, size: str = "b", width: float = 1.0, hidden: int = HIDDEN,
                 input_size: int = IMGSZ) -> None:
        super().__init__()
        self.size, self.nc, self.S, self.B = size, nc, S, BOXES[size]
        self.width, self.hidden, self.input_size = float(width), int(hidden), int(input_size)
        self.strides = (self.input_size // S,)
        downsamples = min(6, int(math.floor(math.log2(self.input_size / S))))
        self.conv = Conv(SPECS[size], width=width, downsamples=downsamples)
        feat = self.input_size // self.conv.stride
        # test-only sizes: a stride-1 average pool takes the last map (feat >= S) to S x S
        self.pool = nn.AvgPool2d(feat - S + 1, stride=1) if feat != S else nn.Identity()
        c = self.conv.c_out
        self.no = S * S * (nc + 5 * self.B)
        if size == "b":
            self.fc1 = nn.Linear(c * S * S, self.hidden)
            self.act = nn.LeakyReLU(0.1, inplace=True)
            self.drop = nn.Dropout(0.5)
            self.fc2 = nn.Linear(self.hidden, self.no)
        elif size == "darknet":
            self.local = LocallyConnected2d(c, _ch(LOCAL_FILTERS, width), 3, in_hw=(S, S), pad=1)
            self.act = nn.LeakyReLU(0.1, inplace=True)
            self.drop = nn.Dropout(0.5)
            self.fc2 = nn.Linear(_ch(LOCAL_FILTERS, width) * S * S, self.no)
        else:
            self.fc2 = nn.Linear(c * S * S, self.no)
        for m in (getattr(self, "fc1", None), self.fc2):
            if m is not None and m.weight.device.type != "meta":
                nn.init.kaiming_normal_(m.weight, a=0.1, mode="fan_in", nonlinearity="leaky_relu")
                nn.init.zeros_(m.bias)
        if self.fc2.weight.device.type != "meta":  # linear outputs start near 0 (small squared-error terms)
            with torch.no_grad():
                self.fc2.weight.mul_(0.01)
        self._warned = False

    def _fit(self, x: Tensor) -> Tensor:
        n = self.input_size
        if tuple(x.shape[-2:]) == (n, n):
            return x
        if torch.jit.is_tracing() or torch.onnx.is_in_onnx_export() or torch.compiler.is_exporting():
            raise ExportError(f"yolo1 takes a fixed {n} x {n} input (its fully connected head needs the {S} x {S} "
                              f"grid); export with imgsz={n}, got {list(x.shape[-2:])}")
        if not self._warned:
            self._warned = True
            logger.warning("yolo1 takes a fixed %d x %d input; resizing a %s input to it", n, n, list(x.shape[-2:]))
        return F.interpolate(x, size=(n, n), mode="bilinear", align_corners=False)

    def forward(self, x: Tensor) -> Tensor:
        y = self.pool(self.conv(self._fit(x)))  # (B, c, S, S)
        if self.size == "darknet":
            y = self.drop(self.act(self.local(y)))  # (B, 256, S, S)
        y = y.flatten(1)  # Darknet's [connected] input order: (c, row, col)
        if self.size == "b":
            y = self.drop(self.act(self.fc1(y)))
        return self.fc2(y)  # (B, S * S * (C + 5 B))

    def darknet_order(self) -> list[nn.Module]:
        """Modules in the cfg's layer order (the ``.weights`` order)."""
        extra = {"b": ["fc1"], "darknet": ["local"], "tiny": []}[self.size]
        return [self.conv, *(getattr(self, n) for n in extra), self.fc2]

    def fuse(self) -> YOLO1Net:
        """Fold every BatchNorm into its conv, in place (the paper's conv + bias layout)."""
        fuse_modules(self)
        return self


def build_yolo1(*, size: str = "b", nc: int, width: float = 1.0, hidden: int = HIDDEN,
                input_size: int = IMGSZ) -> YOLO1Net:
    """Build an untrained YOLOv1 of ``size`` with ``nc`` classes (``width``, ``hidden`` and
    ``input_size``: the test-only options of the module docstring)."""
    if size not in SIZES:
        raise ConfigError(f"yolo1 has no size {size!r}; sizes: {', '.join(SIZES)}")
    if isinstance(nc, bool) or not isinstance(nc, int) or nc < 1:
        raise ConfigError(f"nc must be a positive int, got {nc!r}")
    if not 0 < float(width) <= 1 or int(hidden) < 1:
        raise ConfigError(f"width must be in (0, 1] and hidden >= 1, got width={width!r}, hidden={hidden!r}")
    if isinstance(input_size, bool) or not isinstance(input_size, int) or not S * 2 <= input_size <= IMGSZ:
        raise ConfigError(f"input_size must be an int in [{2 * S}, {IMGSZ}] (448: the published network), "
                          f"got {input_size!r}")
    return YOLO1Net(nc=nc, size=size, width=width, hidden=hidden, input_size=input_size)
