"""Deformable-DETR building blocks shared by the deformable-encoder DETRs (Deformable DETR, DINO).

The frozen-BatchNorm ResNet, the DETR sine position embedding, the input projections + deformable
encoder (multi-scale deformable self-attention over all levels, FFN, post-norm), the decoder layer
(self-attention with an optional denoising mask, deformable cross-attention, FFN, post-norm) and
:class:`DeformableNetBase`, the mode-dependent forward (eval: detections; train: encoder maps) of a
backbone + encoder + decoder network. Both deformable attentions are
:class:`~libreyolo.layers.msda.MSDeformAttn`, so they go through the ``ms_deform_attn`` kernel slot
(SPEC K-8). Family specifics (the decoders, sizes) stay in the family folders.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ...errors import ConfigError
from ...layers.classify import IMAGENET_MEAN, IMAGENET_STD
from ...layers.msda import MSDeformAttn
from .common import PosAttention
from .net import EncoderTrunk


@dataclass(frozen=True, kw_only=True)
class DeformableDETRConfig:
    """Architecture of one size (the paper's values are the defaults)."""

    depth: int = 50  # ResNet depth (18, 34, 50, 101)
    hidden: int = 256
    num_heads: int = 8
    enc_layers: int = 6
    dec_layers: int = 6
    ffn: int = 1024
    num_queries: int = 300
    num_levels: int = 4
    enc_points: int = 4
    dec_points: int = 4
    dropout: float = 0.1
    box_refine: bool = False  # the paper's iterative bounding box refinement
    two_stage: bool = False  # queries from the encoder's top-scoring proposals (implies box_refine)


def sine_embedding(h: int, w: int, dim: int, *, device: torch.device | None = None,
                   dtype: torch.dtype = torch.float32, temperature: float = 10000.0, offset: float = 0.5) -> Tensor:
    """The DETR sine position embedding of an unpadded ``h x w`` map, Tensor[1, h*w, dim].

    Positions ``1..h`` and ``1..w`` are normalised to ``(p - offset) / (n + 1e-6) * 2 pi`` (offset 0.5
    as Deformable DETR; DINO uses 0, the DETR form); each axis
    gets ``dim / 2`` channels ``[sin(p / t_0), cos(p / t_0), sin(p / t_1), ...]`` with
    ``t_i = temperature ** (2 floor(i / 2) / (dim / 2))``; y channels first, then x. Built with
    ``arange`` from Python ints: no host sync (capture-safe).
    """
    if dim % 4:
        raise ConfigError(f"the sine embedding needs a width divisible by 4, got {dim}")
    half = dim // 2
    scale = 2 * math.pi
    ys = torch.arange(1, h + 1, dtype=dtype, device=device)
    xs = torch.arange(1, w + 1, dtype=dtype, device=device)
    ys = (ys - offset) / (ys[-1:] + 1e-6) * scale
    xs = (xs - offset) / (xs[-1:] + 1e-6) * scale
    dim_t = torch.arange(half, dtype=torch.int64, device=device).to(dtype)
    dim_t = temperature ** (2 * torch.div(dim_t, 2, rounding_mode="floor") / half)

    def axis(p: Tensor) -> Tensor:  # (n,) -> (n, half), sin / cos interleaved
        f = p[:, None] / dim_t
        return torch.stack((f[:, 0::2].sin(), f[:, 1::2].cos()), dim=2).flatten(1)

    py, px = axis(ys), axis(xs)
    pos = torch.cat((py[:, None, :].expand(h, w, half), px[None, :, :].expand(h, w, half)), dim=-1)
    return pos.reshape(1, h * w, dim)


class FrozenResNet(nn.Module):
    """torchvision ResNet with frozen BatchNorm (``FrozenBatchNorm2d``), the stem and the first
    stage frozen, as the reference trains it. x (Tensor[B, 3, H, W] RGB in [0, 1]) -> the outputs
    of stages 2, 3, 4 (strides 8, 16, 32)."""

    def __init__(self, *, depth: int = 50) -> None:
        super().__init__()
        from torchvision.models import resnet18, resnet34, resnet50, resnet101
        from torchvision.ops import FrozenBatchNorm2d

        builders = {18: resnet18, 34: resnet34, 50: resnet50, 101: resnet101}
        if depth not in builders:
            raise ConfigError(f"no ResNet of depth {depth}; depths: {', '.join(map(str, builders))}")
        net = builders[depth](weights=None, norm_layer=FrozenBatchNorm2d)
        self.conv1, self.bn1, self.relu, self.maxpool = net.conv1, net.bn1, net.relu, net.maxpool
        self.layer1, self.layer2, self.layer3, self.layer4 = net.layer1, net.layer2, net.layer3, net.layer4
        wide = 4 if depth >= 50 else 1
        self.out_channels = (128 * wide, 256 * wide, 512 * wide)
        self.out_strides = (8, 16, 32)
        for module in (self.conv1, self.bn1, self.layer1):
            for p in module.parameters():
                p.requires_grad_(False)
        self.register_buffer("mean", torch.tensor(IMAGENET_MEAN).view(1, 3, 1, 1), persistent=False)
        self.register_buffer("std", torch.tensor(IMAGENET_STD).view(1, 3, 1, 1), persistent=False)

    def forward(self, x: Tensor) -> list[Tensor]:
        x = (x - self.mean.to(x.dtype)) / self.std.to(x.dtype)
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
        c3 = self.layer2(self.layer1(x))
        c4 = self.layer3(c3)
        return [c3, c4, self.layer4(c4)]


class FFN(nn.Module):
    """Linear -> ReLU -> dropout -> Linear (the transformer feed-forward block)."""

    def __init__(self, dim: int, hidden: int, *, dropout: float) -> None:
        super().__init__()
        self.linear1, self.linear2 = nn.Linear(dim, hidden), nn.Linear(hidden, dim)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x: Tensor) -> Tensor:
        return self.linear2(self.dropout(F.relu(self.linear1(x))))


class EncoderLayer(nn.Module):
    """Deformable self-attention over all levels (queries = tokens + position), FFN; post-norm."""

    def __init__(self, cfg: DeformableDETRConfig) -> None:
        super().__init__()
        d = cfg.hidden
        self.self_attn = MSDeformAttn(embed_dim=d, num_heads=cfg.num_heads, num_levels=cfg.num_levels,
                                      num_points=cfg.enc_points)
        self.norm1, self.norm2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.ffn = FFN(d, cfg.ffn, dropout=cfg.dropout)
        self.dropout = nn.Dropout(cfg.dropout)

    def forward(self, src: Tensor, pos: Tensor, ref: Tensor, shapes: Sequence[tuple[int, int]]) -> Tensor:
        src = self.norm1(src + self.dropout(self.self_attn(src + pos, ref, src, shapes)))
        return self.norm2(src + self.dropout(self.ffn(src)))


class DeformableEncoder(nn.Module):
    """Input projections, level embeddings and the deformable encoder layers.

    forward(feats): the backbone's 3 maps -> ``num_levels`` maps Tensor[B, hidden, h_l, w_l]
    (levels beyond the backbone's: 3x3 stride-2 convolutions, the first of the last backbone
    map, the next ones of the previous projected level).

    ``POS_TEMPERATURE`` / ``POS_OFFSET``: the sine position embedding's settings (a subclass may
    change them: DINO's are 20 and 0).
    """

    POS_TEMPERATURE: float = 10000.0
    POS_OFFSET: float = 0.5

    def __init__(self, in_channels: Sequence[int], cfg: DeformableDETRConfig) -> None:
        super().__init__()
        d = cfg.hidden
        if d % 32:
            raise ConfigError(f"hidden={d} must be a multiple of 32 (GroupNorm(32) after each projection)")
        if cfg.num_levels < len(in_channels):
            raise ConfigError(f"num_levels={cfg.num_levels} is below the backbone's {len(in_channels)} maps")
        proj = [nn.Sequential(nn.Conv2d(c, d, 1), nn.GroupNorm(32, d)) for c in in_channels]
        c = in_channels[-1]
        for _ in range(cfg.num_levels - len(in_channels)):
            proj.append(nn.Sequential(nn.Conv2d(c, d, 3, stride=2, padding=1), nn.GroupNorm(32, d)))
            c = d
        self.input_proj = nn.ModuleList(proj)
        self.level_embed = nn.Parameter(torch.empty(cfg.num_levels, d))
        self.layers = nn.ModuleList(EncoderLayer(cfg) for _ in range(cfg.enc_layers))
        self.num_backbone = len(in_channels)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        nn.init.normal_(self.level_embed)
        for seq in self.input_proj:
            nn.init.xavier_uniform_(seq[0].weight, gain=1)
            nn.init.zeros_(seq[0].bias)

    def project(self, feats: Sequence[Tensor]) -> list[Tensor]:
        maps = [self.input_proj[i](f) for i, f in enumerate(feats)]
        for i in range(self.num_backbone, len(self.input_proj)):
            maps.append(self.input_proj[i](feats[-1] if i == self.num_backbone else maps[-1]))
        return maps

    @staticmethod
    def reference_points(shapes: Sequence[tuple[int, int]], *, device: torch.device, dtype: torch.dtype) -> Tensor:
        """Pixel centres of every level, normalised: Tensor[1, S, 2] (x, y)."""
        refs = []
        for h, w in shapes:
            ry, rx = torch.meshgrid(torch.linspace(0.5, h - 0.5, h, dtype=dtype, device=device),
                                    torch.linspace(0.5, w - 0.5, w, dtype=dtype, device=device), indexing="ij")
            refs.append(torch.stack((rx.reshape(-1) / w, ry.reshape(-1) / h), -1))
        return torch.cat(refs, 0)[None]

    def forward(self, feats: Sequence[Tensor]) -> list[Tensor]:
        maps = self.project(feats)
        shapes = [(int(m.shape[-2]), int(m.shape[-1])) for m in maps]
        b, d = maps[0].shape[:2]
        src = torch.cat([m.flatten(2).transpose(1, 2) for m in maps], 1)  # (B, S, D)
        pos = torch.cat([sine_embedding(h, w, d, device=src.device, dtype=src.dtype, temperature=self.POS_TEMPERATURE,
                                        offset=self.POS_OFFSET) + self.level_embed[i].view(1, 1, -1)
                         for i, (h, w) in enumerate(shapes)], 1)
        ref = self.reference_points(shapes, device=src.device, dtype=src.dtype)
        ref = ref[:, :, None].expand(b, ref.shape[1], len(shapes), 2)  # (B, S, L, 2): no padding, valid ratio 1
        for layer in self.layers:
            src = layer(src, pos, ref, shapes)
        out, start = [], 0
        for h, w in shapes:
            out.append(src[:, start:start + h * w].transpose(1, 2).reshape(b, d, h, w))
            start += h * w
        return out


class DecoderLayer(nn.Module):
    """Self-attention (queries and keys get the query position), deformable cross-attention
    around the reference point, FFN; post-norm."""

    def __init__(self, cfg: DeformableDETRConfig) -> None:
        super().__init__()
        d = cfg.hidden
        self.self_attn = PosAttention(d, num_heads=cfg.num_heads, dropout=cfg.dropout)
        self.cross_attn = MSDeformAttn(embed_dim=d, num_heads=cfg.num_heads, num_levels=cfg.num_levels,
                                       num_points=cfg.dec_points)
        self.norm1, self.norm2, self.norm3 = nn.LayerNorm(d), nn.LayerNorm(d), nn.LayerNorm(d)
        self.ffn = FFN(d, cfg.ffn, dropout=cfg.dropout)
        self.dropout = nn.Dropout(cfg.dropout)

    def forward(self, tgt: Tensor, pos: Tensor, ref: Tensor, memory: Tensor,
                shapes: Sequence[tuple[int, int]], attn_mask: Tensor | None = None) -> Tensor:
        """``attn_mask`` (Tensor[Q, Q] bool, True = may not attend): the self-attention mask of
        denoising groups (DINO); None for Deformable DETR."""
        tgt = self.norm1(tgt + self.dropout(self.self_attn(tgt, pos, attn_mask)))
        tgt = self.norm2(tgt + self.dropout(self.cross_attn(tgt + pos, ref, memory, shapes)))
        return self.norm3(tgt + self.dropout(self.ffn(tgt)))



class DeformableNetBase(nn.Module):
    """``backbone`` + ``encoder`` + ``decoder`` (set by the subclass) with the mode-dependent forward
    (eval: ``decode(encode(x))``; train: the encoder maps) and ``strides`` of the levels."""

    backbone: nn.Module
    encoder: nn.Module
    decoder: nn.Module
    strides: tuple[int, ...]

    def encode(self, x: Tensor) -> tuple[Tensor, ...]:
        """x (Tensor[B, 3, H, W], sides multiples of 32) -> ``num_levels`` Tensor[B, hidden, H/s, W/s]."""
        return tuple(self.encoder(self.backbone(x)))

    def trunk(self) -> EncoderTrunk:
        """A module holding (not copying) the backbone and encoder, in this network's mode: the
        capturable stage of a training step (SPEC G-9)."""
        t = EncoderTrunk(self.backbone, self.encoder)
        t.training = self.training
        return t

    def decode(self, feats: Sequence[Tensor]) -> tuple[Tensor, Tensor]:
        """Inference decode: maps -> (logits Tensor[B, Q, nc], boxes Tensor[B, Q, 4] xyxy pixels)."""
        logits, boxes = self.decoder(list(feats))
        s = self.strides[0]
        h, w = int(feats[0].shape[-2]) * s, int(feats[0].shape[-1]) * s
        cx, cy, bw, bh = boxes.unbind(-1)  # Python-int scales: no host-to-device copy (capture-safe)
        xyxy = torch.stack(((cx - bw / 2) * w, (cy - bh / 2) * h, (cx + bw / 2) * w, (cy + bh / 2) * h), -1)
        return logits, xyxy

    def forward(self, x: Tensor) -> tuple[Tensor, ...]:
        feats = self.encode(x)
        if self.training:
            return feats
        return self.decode(feats)
