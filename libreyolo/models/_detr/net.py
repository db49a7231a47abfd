"""The RT-DETR-style detector assembled from the shared parts, plus its inference decode.

:class:`EncoderDecoderDetector` = ResNet-vd backbone -> hybrid encoder -> deformable decoder.
Families (RT-DETR, RT-DETRv2) build it from their size tables; the network class is shared
because the two families differ only in configuration.

Forward contract (mode dependent, on purpose: the seam of SPEC G-9 sits between the two):

* eval: ``net(x)`` = ``net.decode(net.encode(x))`` -> ``(logits, boxes)``: logits
  (Tensor[B, Q, nc]) and boxes (Tensor[B, Q, 4], xyxy in network-input pixels), Q =
  min(300, tokens). No host sync, no data-dependent shape: capturable whole.
* train: ``net(x)`` = ``tuple(net.encode(x))``: the encoder maps only (backbone + encoder,
  the part a training CUDA graph captures). The criterion then runs ``net.decoder`` eagerly
  with the denoising queries built from the batch's ground truth (their count follows the
  largest box count of the batch, so the decoder is never captured in training).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import torch
from torch import Tensor, nn

from ...layers.conv import fuse_modules
from .decoder import DETRDecoder
from .hybrid_encoder import HybridEncoder
from .resnet_vd import ResNetVd


@dataclass(frozen=True, kw_only=True)
class DETRNetConfig:
    """Architecture of one size (see the families' ``variants.py`` for the published values)."""

    depth: int  # ResNet-vd depth
    expansion: float  # RepC3 expansion in the encoder
    dec_layers: int
    hidden: int = 256
    enc_ffn: int = 1024
    dec_ffn: int = 1024
    num_heads: int = 8
    num_queries: int = 300
    num_points: int | tuple[int, ...] = 4
    method: Literal["default", "discrete"] = "default"
    num_denoising: int = 100
    label_noise: float = 0.5
    box_noise: float = 1.0
    eval_idx: int = -1
    backbone_width: int = 64  # 64 in every published size; smaller only for tests


class EncoderTrunk(nn.Module):
    """Backbone + encoder as a module of their own (shares their parameters), for the training
    capture: a graph of the trunk must not list the decoder's parameters, which its forward does
    not use. x (Tensor[B, 3, H, W]) -> tuple of 3 Tensor[B, hidden, H/s, W/s]."""

    def __init__(self, backbone: nn.Module, encoder: nn.Module) -> None:
        super().__init__()
        self.backbone = backbone
        self.encoder = encoder

    def forward(self, x: Tensor) -> tuple[Tensor, ...]:
        return tuple(self.encoder(self.backbone(x)))


class EncoderDecoderDetector(nn.Module):
    """Backbone + hybrid encoder + decoder (see module docs for the mode-dependent forward)."""

    def __init__(self, *, cfg: DETRNetConfig, nc: int) -> None:
        super().__init__()
        self.nc = nc
        self.cfg = cfg
        self.backbone = ResNetVd(depth=cfg.depth, width=cfg.backbone_width)
        self.strides = self.backbone.out_strides  # (8, 16, 32)
        self.encoder = HybridEncoder(in_channels=self.backbone.out_channels, hidden=cfg.hidden,
                                     num_heads=cfg.num_heads, ffn=cfg.enc_ffn, expansion=cfg.expansion)
        self.decoder = DETRDecoder(nc=nc, hidden=cfg.hidden, num_queries=cfg.num_queries,
                                   feat_channels=(cfg.hidden,) * len(self.strides), num_points=cfg.num_points,
                                   method=cfg.method, num_heads=cfg.num_heads, num_layers=cfg.dec_layers,
                                   ffn=cfg.dec_ffn, eval_idx=cfg.eval_idx, num_denoising=cfg.num_denoising,
                                   label_noise=cfg.label_noise, box_noise=cfg.box_noise)

    def encode(self, x: Tensor) -> tuple[Tensor, ...]:
        """x (Tensor[B, 3, H, W], H and W multiples of 32) -> 3 maps Tensor[B, hidden, H/s, W/s]."""
        return tuple(self.encoder(self.backbone(x)))

    def trunk(self) -> EncoderTrunk:
        """A module holding (not copying) the backbone and encoder, in this network's mode.

        Not a registered child (the state dict keeps one copy of each weight); build it when
        needed, e.g. to capture the training forward of the trunk alone (SPEC G-9).
        """
        t = EncoderTrunk(self.backbone, self.encoder)
        t.training = self.training
        return t

    def decode(self, feats: Sequence[Tensor]) -> tuple[Tensor, Tensor]:
        """Inference decode: maps -> (logits Tensor[B, Q, nc], boxes Tensor[B, Q, 4] xyxy pixels).

        The input size is ``(h_0 * 8, w_0 * 8)`` of the finest map (inputs are stride multiples).
        """
        logits, boxes = self.decoder(list(feats))
        s = self.strides[0]
        h, w = int(feats[0].shape[-2]) * s, int(feats[0].shape[-1]) * s
        cx, cy, bw, bh = boxes.unbind(-1)
        xyxy = torch.stack(((cx - bw / 2) * w, (cy - bh / 2) * h, (cx + bw / 2) * w, (cy + bh / 2) * h), -1)
        return logits, xyxy

    def forward(self, x: Tensor) -> tuple[Tensor, ...]:
        feats = self.encode(x)
        if self.training:
            return feats
        return self.decode(feats)

    def fuse(self) -> None:
        """Fold BatchNorms and merge RepVGG branches (inference only)."""
        fuse_modules(self)


def topk_detections(logits: Tensor, boxes: Tensor, *, conf: float, classes: list[int] | None, max_det: int,
                    num_top: int = 300) -> list[Tensor]:
    """DETR decode without NMS: the top ``min(max_det, num_top)`` (query, class) pairs by sigmoid
    score, then the ``conf`` threshold.

    logits (Tensor[B, Q, nc]); boxes (Tensor[B, Q, 4] xyxy pixels) -> per image Tensor[n, 6]
    float32 (x1, y1, x2, y2, score, class), rows by decreasing score. A query may appear with
    several classes, as in the reference.
    """
    b, q, nc = logits.shape
    scores = logits.float().sigmoid()
    if classes is not None:
        keep = torch.zeros(nc, dtype=torch.bool, device=scores.device)
        ids = [c for c in classes if 0 <= int(c) < nc]
        if ids:
            keep[torch.as_tensor(ids, device=scores.device)] = True
        scores = scores * keep
    k = min(max(int(max_det), 0), num_top, q * nc)
    top, idx = scores.flatten(1).topk(k, dim=1)  # (B, k)
    qi, lab = idx // nc, idx % nc
    picked = boxes.float().gather(1, qi[..., None].expand(b, k, 4))
    out = []
    for i in range(b):
        m = top[i] > conf
        out.append(torch.cat([picked[i][m], top[i][m, None], lab[i][m, None].float()], 1))
    return out
