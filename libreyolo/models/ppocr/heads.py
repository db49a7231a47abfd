"""PP-OCRv4 mobile detector (PP-LCNetV3 + RSE-FPN + DB head) and recogniser (PP-LCNetV3 + SVTR
neck + CTC head), after PaddleOCR's ``necks/db_fpn.py`` (RSEFPN), ``heads/det_db_head.py``
(DBHead), ``necks/rnn.py`` (EncoderWithSVTR) and ``heads/rec_ctc_head.py`` (layer order and sizes
read there; our own code).

Input contract: both networks take RGB Tensor[B, 3, H, W] in [0, 1] and normalise inside as the
PaddleOCR pipelines do (BGR channel order; the detector with ImageNet mean / std, the recogniser
to [-1, 1]).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .cls import AngleClassifier
from .nn import SE, LCNetV3

DET_MEAN = (0.485, 0.456, 0.406)  # applied to the B, G, R channels in this order, as PaddleOCR does
DET_STD = (0.229, 0.224, 0.225)


class RSELayer(nn.Module):
    """conv (no bias) then ``x + SE(x)`` (hard sigmoid slope 0.2)."""

    def __init__(self, cin: int, cout: int, k: int) -> None:
        super().__init__()
        self.in_conv = nn.Conv2d(cin, cout, k, padding=k // 2, bias=False)
        self.se_block = SE(cout, slope=0.2)

    def forward(self, x: Tensor) -> Tensor:
        x = self.in_conv(x)
        return x + self.se_block(x)


class RSEFPN(nn.Module):
    """Four taps -> top-down sums -> four 3x3 RSE layers (``c // 4`` each) upsampled to stride 4 and concatenated."""

    def __init__(self, cins: list[int], c: int) -> None:
        super().__init__()
        self.ins_conv = nn.ModuleList(RSELayer(ci, c, 1) for ci in cins)
        self.inp_conv = nn.ModuleList(RSELayer(c, c // 4, 3) for _ in cins)

    def forward(self, feats: list[Tensor]) -> Tensor:
        c2, c3, c4, c5 = feats
        in5, in4 = self.ins_conv[3](c5), self.ins_conv[2](c4)  # deepest first (PaddleOCR's order)
        in3, in2 = self.ins_conv[1](c3), self.ins_conv[0](c2)
        out4 = in4 + F.interpolate(in5, scale_factor=2.0, mode="nearest")
        out3 = in3 + F.interpolate(out4, scale_factor=2.0, mode="nearest")
        out2 = in2 + F.interpolate(out3, scale_factor=2.0, mode="nearest")
        p5 = F.interpolate(self.inp_conv[3](in5), scale_factor=8.0, mode="nearest")
        p4 = F.interpolate(self.inp_conv[2](out4), scale_factor=4.0, mode="nearest")
        p3 = F.interpolate(self.inp_conv[1](out3), scale_factor=2.0, mode="nearest")
        return torch.cat([p5, p4, p3, self.inp_conv[0](out2)], 1)


class DBBranch(nn.Module):
    """3x3 conv-BN-ReLU (c/4) -> 2x2 transposed conv-BN-ReLU -> 2x2 transposed conv to 1 channel -> sigmoid."""

    def __init__(self, c: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(c, c // 4, 3, padding=1, bias=False)
        self.conv_bn1 = nn.BatchNorm2d(c // 4)
        self.conv2 = nn.ConvTranspose2d(c // 4, c // 4, 2, 2)
        self.conv_bn2 = nn.BatchNorm2d(c // 4)
        self.conv3 = nn.ConvTranspose2d(c // 4, 1, 2, 2)

    def forward(self, x: Tensor) -> Tensor:
        x = F.relu(self.conv_bn1(self.conv1(x)))
        x = F.relu(self.conv_bn2(self.conv2(x)))
        return torch.sigmoid(self.conv3(x))


class TextDetector(nn.Module):
    """DBNet: ``eval``: probability map Tensor[B, 1, H, W] (the shrink map, input resolution);
    ``train``: Tensor[B, 3, H, W] = shrink map, threshold map, approximate binary map ``1 / (1 + exp(-k (P - T)))``."""

    def __init__(self, scale: float, neck: int, k: int = 50) -> None:
        super().__init__()
        self.backbone = LCNetV3(scale, det=True)
        self.neck = RSEFPN(list(self.backbone.out_channels), neck)  # type: ignore[arg-type]
        self.binarize = DBBranch(neck)
        self.thresh = DBBranch(neck)
        self.k = k
        self.register_buffer("mean", torch.tensor(DET_MEAN).view(1, 3, 1, 1), persistent=False)
        self.register_buffer("std", torch.tensor(DET_STD).view(1, 3, 1, 1), persistent=False)

    def normalise(self, x: Tensor) -> Tensor:
        return (x.flip(1) - self.mean.to(x.dtype)) / self.std.to(x.dtype)

    def forward(self, x: Tensor) -> Tensor:
        f = self.neck(self.backbone(self.normalise(x)))
        shrink = self.binarize(f)
        if not self.training:
            return shrink
        thresh = self.thresh(f)
        return torch.cat([shrink, thresh, torch.reciprocal(1 + torch.exp(-self.k * (shrink - thresh)))], 1)


class ConvBNSwish(nn.Module):
    def __init__(self, cin: int, cout: int, k: tuple[int, int] = (1, 1)) -> None:
        super().__init__()
        self.conv = nn.Conv2d(cin, cout, k, padding=(k[0] // 2, k[1] // 2), bias=False)
        self.norm = nn.BatchNorm2d(cout)

    def forward(self, x: Tensor) -> Tensor:
        return F.silu(self.norm(self.conv(x)))


class Attention(nn.Module):
    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        self.heads, self.scale = heads, (dim // heads) ** -0.5
        self.qkv = nn.Linear(dim, dim * 3)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x: Tensor) -> Tensor:
        b, n, c = x.shape
        qkv = self.qkv(x).reshape(b, n, 3, self.heads, c // self.heads).permute(2, 0, 3, 1, 4)  # (3, B, h, N, d)
        q, k, v = qkv[0] * self.scale, qkv[1], qkv[2]
        attn = (q @ k.transpose(-2, -1)).softmax(-1)
        return self.proj((attn @ v).transpose(1, 2).reshape(b, n, c))


class SVTRBlock(nn.Module):
    """Global-mixing transformer block: ``x + attn(LN(x))`` then ``x + MLP(LN(x))`` (Swish, ratio 2)."""

    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        self.norm1 = nn.LayerNorm(dim, eps=1e-5)
        self.mixer = Attention(dim, heads)
        self.norm2 = nn.LayerNorm(dim, eps=1e-5)
        self.fc1 = nn.Linear(dim, dim * 2)
        self.fc2 = nn.Linear(dim * 2, dim)

    def forward(self, x: Tensor) -> Tensor:
        x = x + self.mixer(self.norm1(x))
        return x + self.fc2(F.silu(self.fc1(self.norm2(x))))


class SVTRNeck(nn.Module):
    """EncoderWithSVTR: (1, 3) conv to c/8, 1x1 to ``hidden``, ``depth`` global blocks, LN, 1x1 back to c,
    concatenated with the input, (1, 3) conv to c/8, 1x1 to ``dims``."""

    def __init__(self, c: int, dims: int, hidden: int, depth: int, heads: int) -> None:
        super().__init__()
        self.conv1 = ConvBNSwish(c, c // 8, (1, 3))
        self.conv2 = ConvBNSwish(c // 8, hidden)
        self.blocks = nn.ModuleList(SVTRBlock(hidden, heads) for _ in range(depth))
        self.norm = nn.LayerNorm(hidden, eps=1e-6)
        self.conv3 = ConvBNSwish(hidden, c)
        self.conv4 = ConvBNSwish(2 * c, c // 8, (1, 3))
        self.conv1x1 = ConvBNSwish(c // 8, dims)

    def forward(self, x: Tensor) -> Tensor:
        z = self.conv2(self.conv1(x))
        b, c, h, w = z.shape
        z = z.flatten(2).transpose(1, 2)  # (B, H*W, C)
        for blk in self.blocks:
            z = blk(z)
        z = self.norm(z).reshape(b, h, w, c).permute(0, 3, 1, 2)
        z = torch.cat([x, self.conv3(z)], 1)
        return self.conv1x1(self.conv4(z))


class TextRecogniser(nn.Module):
    """Crops Tensor[N, 3, 48, W] RGB in [0, 1] -> ``eval``: character probabilities Tensor[N, W/8, nc + 1]
    (softmax; index 0 is the CTC blank); ``train``: the logits."""

    def __init__(self, scale: float, nc: int, dims: int, hidden: int, depth: int, heads: int) -> None:
        super().__init__()
        self.backbone = LCNetV3(scale, det=False)
        self.neck = SVTRNeck(int(self.backbone.out_channels), dims, hidden, depth, heads)  # type: ignore[arg-type]
        self.fc = nn.Linear(dims, nc + 1)

    def forward(self, x: Tensor) -> Tensor:
        f = self.neck(self.backbone(x.flip(1) * 2.0 - 1.0))  # (N, dims, 1, T)
        logits = self.fc(f.squeeze(2).transpose(1, 2))  # (N, T, nc + 1)
        return logits if self.training else logits.softmax(-1)


class PPOCRNet(nn.Module):
    """The networks of a PP-OCR system. ``forward`` is the detector (what a CUDA graph holds and
    ONNX exports); :attr:`rec` is applied by the family's eager stage to the detected regions, and
    before it, where enabled, the angle classifier :attr:`cls` (:mod:`.cls`; the buffer
    ``cls_loaded`` says whether it holds trained weights, and is saved with them)."""

    def __init__(self, *, det_scale: float, neck: int, rec_scale: float, nc: int, dims: int, hidden: int,
                 depth: int, heads: int, rec_hw: tuple[int, int]) -> None:
        super().__init__()
        self.det = TextDetector(det_scale, neck)
        self.rec = TextRecogniser(rec_scale, nc, dims, hidden, depth, heads)
        self.cls = AngleClassifier()
        self.register_buffer("cls_loaded", torch.zeros((), dtype=torch.bool))
        self.rec_hw = rec_hw

    def forward(self, x: Tensor) -> Tensor:
        return self.det(x)

    def fuse(self) -> None:
        self.det.backbone.fuse()
        self.rec.backbone.fuse()
