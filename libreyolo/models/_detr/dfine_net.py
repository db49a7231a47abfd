"""The D-FINE detector (also DEIM's network): HGNetv2 -> GELAN hybrid encoder -> FDR decoder.

Forward contract, identical to :class:`~libreyolo.models._detr.net.EncoderDecoderDetector` so the
shared family glue (seam, top-k postprocess, export) applies unchanged:

* eval: ``net(x)`` = ``net.decode(net.encode(x))`` -> (logits Tensor[B, Q, nc], boxes
  Tensor[B, Q, 4] xyxy network-input pixels), Q = min(300, tokens); capturable whole.
* train: ``net(x)`` = the encoder maps (tuple of Tensor[B, hidden, H/s, W/s]); the criterion
  runs ``net.decoder`` eagerly with denoising queries.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import Tensor, nn

from ...layers.conv import fuse_modules
from .dfine_decoder import DFineDecoder
from .elan_encoder import ELANHybridEncoder
from .hgnetv2 import HGNetv2
from .net import EncoderTrunk


@dataclass(frozen=True, kw_only=True)
class DFineNetConfig:
    """Architecture of one size (published values in the families' ``variants.py``)."""

    backbone: str = "B0"
    return_idx: tuple[int, ...] = (1, 2, 3)
    hidden: int = 256
    enc_ffn: int = 1024
    expansion: float = 1.0
    depth_mult: float = 1.0
    dec_layers: int = 6
    dec_ffn: int = 1024
    num_points: tuple[int, ...] = (3, 6, 3)
    num_heads: int = 8
    num_queries: int = 300
    num_denoising: int = 100
    label_noise: float = 0.5
    box_noise: float = 1.0
    reg_max: int = 32
    reg_scale: float = 4.0
    eval_idx: int = -1
    act: str = "relu"  # decoder FFN + LQE ("silu" in DEIM / RT-DETRv4 configs)
    mlp_act: str = "relu"  # query-position and box heads (likewise)


class DFineDetector(nn.Module):
    """HGNetv2 + ELAN hybrid encoder + FDR decoder (see module docs)."""

    def __init__(self, *, cfg: DFineNetConfig, nc: int) -> None:
        super().__init__()
        self.nc = nc
        self.cfg = cfg
        self.backbone = HGNetv2(name=cfg.backbone, return_idx=cfg.return_idx, use_lab=True)
        self.strides = self.backbone.out_strides
        self.encoder = ELANHybridEncoder(in_channels=self.backbone.out_channels, hidden=cfg.hidden,
                                         num_heads=cfg.num_heads, ffn=cfg.enc_ffn, expansion=cfg.expansion,
                                         depth_mult=cfg.depth_mult)
        self.decoder = DFineDecoder(nc=nc, hidden=cfg.hidden, num_queries=cfg.num_queries,
                                    feat_channels=(cfg.hidden,) * len(self.strides), num_points=cfg.num_points,
                                    num_heads=cfg.num_heads, num_layers=cfg.dec_layers, ffn=cfg.dec_ffn,
                                    eval_idx=cfg.eval_idx, num_denoising=cfg.num_denoising,
                                    label_noise=cfg.label_noise, box_noise=cfg.box_noise, reg_max=cfg.reg_max,
                                    reg_scale=cfg.reg_scale, act=cfg.act, mlp_act=cfg.mlp_act)

    def encode(self, x: Tensor) -> tuple[Tensor, ...]:
        """x (Tensor[B, 3, H, W], H and W multiples of 32) -> maps Tensor[B, hidden, H/s, W/s]."""
        return tuple(self.encoder(self.backbone(x)))

    def trunk(self) -> EncoderTrunk:
        """Backbone + encoder as one module (shared parameters) for the training capture."""
        t = EncoderTrunk(self.backbone, self.encoder)
        t.training = self.training
        return t

    def decode(self, feats: Sequence[Tensor]) -> tuple[Tensor, Tensor]:
        """Inference decode: maps -> (logits Tensor[B, Q, nc], boxes Tensor[B, Q, 4] xyxy pixels)."""
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
