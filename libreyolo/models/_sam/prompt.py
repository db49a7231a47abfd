"""The prompt side of the SAM lineage: prompt encoder, two-way transformer and mask decoder.

Both SAM and MobileSAM use this half unchanged; only the image encoder differs. Parameter names
follow the original ``segment-anything`` checkpoints (``prompt_encoder.*``, ``mask_decoder.*``), so
an official state dict loads one to one. Every attention site runs through the shared attention
equation / SDPA decision (:func:`libreyolo.kernels.attention.use_sdpa`) with a ``fused_attn``
flag, off by default (SPEC K-9).

Tensor contract of the half (:class:`PromptPath`): image embeddings Tensor[B, C, h, w] and the
prompts of :class:`Prompts` (input pixels of the network input of size H x W) ->
low-resolution mask logits Tensor[B, P, M, 4h, 4w] and IoU predictions Tensor[B, P, M], with
``M = 3`` for ``multimask`` and 1 otherwise.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ...errors import ConfigError
from ...kernels.attention import use_sdpa
from ...layers.attention import attention_equation


class LayerNorm2d(nn.Module):
    """LayerNorm over the channels of Tensor[B, C, H, W] (mean / variance per pixel)."""

    def __init__(self, channels: int, eps: float = 1e-6) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(channels))
        self.bias = nn.Parameter(torch.zeros(channels))
        self.eps = eps

    def forward(self, x: Tensor) -> Tensor:
        u = x.mean(1, keepdim=True)
        s = (x - u).pow(2).mean(1, keepdim=True)
        x = (x - u) / torch.sqrt(s + self.eps)
        return self.weight[:, None, None] * x + self.bias[:, None, None]


@dataclass(frozen=True, kw_only=True)
class Prompts:
    """The prompts of one call, shared by every image of the batch.

    points (Tensor[P, N, 2] float32 or None): x, y in network-input pixels; labels (Tensor[P, N]
    int64): 1 foreground, 0 background, -1 padding; boxes (Tensor[P, 4] float32 or None): x1 y1
    x2 y2 in network-input pixels. ``P`` prompts give ``P`` objects; ``multimask`` asks for the
    three candidate masks of each instead of one.
    """

    points: Tensor | None = None
    labels: Tensor | None = None
    boxes: Tensor | None = None
    multimask: bool = False

    @property
    def count(self) -> int:
        ref = self.boxes if self.boxes is not None else self.points
        return int(ref.shape[0]) if ref is not None else 0

    def to(self, device: torch.device) -> Prompts:
        mv = (lambda t: t.to(device) if t is not None else None)  # noqa: E731
        return Prompts(points=mv(self.points), labels=mv(self.labels), boxes=mv(self.boxes), multimask=self.multimask)


def centre_prompt(hw: tuple[int, int], device: torch.device) -> Prompts:
    """The default prompt: one foreground point at the centre of the network input."""
    pt = torch.tensor([[[hw[1] / 2.0, hw[0] / 2.0]]], device=device)
    return Prompts(points=pt, labels=torch.ones(1, 1, dtype=torch.int64, device=device))


class RandomFourierPE(nn.Module):
    """Positional encoding of normalised coordinates by a fixed random Gaussian projection.

    forward(coords Tensor[..., 2] in [0, 1]) -> Tensor[..., 2 * F] (sin, cos).
    """

    def __init__(self, num_feats: int, scale: float = 1.0) -> None:
        super().__init__()
        self.register_buffer("positional_encoding_gaussian_matrix", scale * torch.randn(2, num_feats))

    def forward(self, coords: Tensor) -> Tensor:
        c = (2 * coords - 1) @ self.positional_encoding_gaussian_matrix.to(coords.dtype)
        c = 2 * math.pi * c
        return torch.cat([torch.sin(c), torch.cos(c)], dim=-1)

    def grid(self, h: int, w: int) -> Tensor:
        """The dense encoding of an h x w grid of cell centres: Tensor[C, h, w]."""
        m = self.positional_encoding_gaussian_matrix
        ys = (torch.arange(h, device=m.device, dtype=m.dtype) + 0.5) / h
        xs = (torch.arange(w, device=m.device, dtype=m.dtype) + 0.5) / w
        coords = torch.stack([xs[None, :].expand(h, w), ys[:, None].expand(h, w)], dim=-1)
        return self(coords).permute(2, 0, 1)


class PromptEncoder(nn.Module):
    """Sparse (points, box corners) and dense (no-mask) prompt embeddings of width ``dim``."""

    def __init__(self, dim: int, mask_chans: int = 16) -> None:
        super().__init__()
        self.dim = dim
        self.pe_layer = RandomFourierPE(dim // 2)
        self.point_embeddings = nn.ModuleList(nn.Embedding(1, dim) for _ in range(4))  # neg, pos, tl, br
        self.not_a_point_embed = nn.Embedding(1, dim)
        # dense mask prompt branch of the reference (kept for checkpoint parity; mask prompts are not exposed)
        self.mask_downscaling = nn.Sequential(
            nn.Conv2d(1, mask_chans // 4, 2, 2), LayerNorm2d(mask_chans // 4), nn.GELU(),
            nn.Conv2d(mask_chans // 4, mask_chans, 2, 2), LayerNorm2d(mask_chans), nn.GELU(),
            nn.Conv2d(mask_chans, dim, 1))
        self.no_mask_embed = nn.Embedding(1, dim)

    def sparse(self, prompts: Prompts, input_hw: tuple[int, int]) -> Tensor:
        """Prompts -> Tensor[P, T, dim] (points, a padding point when no box, then the two box corners)."""
        norm = torch.tensor([input_hw[1], input_hw[0]], dtype=torch.float32, device=self.no_mask_embed.weight.device)
        parts = []
        if prompts.points is not None:
            pts, lab = prompts.points.float() + 0.5, prompts.labels
            if prompts.boxes is None:
                pts = torch.cat([pts, torch.zeros_like(pts[:, :1])], dim=1)
                lab = torch.cat([lab, -torch.ones_like(lab[:, :1])], dim=1)
            emb = self.pe_layer(pts / norm)
            lab = lab[..., None]
            emb = torch.where(lab == -1, self.not_a_point_embed.weight.expand_as(emb), emb)
            emb = emb + torch.where(lab == 0, self.point_embeddings[0].weight, torch.zeros_like(emb))
            emb = emb + torch.where(lab == 1, self.point_embeddings[1].weight, torch.zeros_like(emb))
            parts.append(emb)
        if prompts.boxes is not None:
            corners = (prompts.boxes.float() + 0.5).view(-1, 2, 2)
            emb = self.pe_layer(corners / norm)
            corner_w = torch.cat([self.point_embeddings[2].weight, self.point_embeddings[3].weight])  # (2, dim)
            parts.append(emb + corner_w)
        if not parts:
            raise ConfigError("a prompt needs points or boxes")
        return torch.cat(parts, dim=1)


class PromptAttention(nn.Module):
    """Attention with separate q / k / v projections into ``dim // downsample`` channels.

    forward(q Tensor[B, Nq, dim], k Tensor[B, Nk, dim], v Tensor[B, Nk, dim]) -> Tensor[B, Nq, dim].
    """

    def __init__(self, dim: int, num_heads: int, downsample: int = 1, fused_attn: bool = False) -> None:
        super().__init__()
        inner = dim // downsample
        if inner % num_heads:
            raise ConfigError(f"attention width {inner} is not divisible by num_heads={num_heads}")
        self.num_heads = num_heads
        self.q_proj = nn.Linear(dim, inner)
        self.k_proj = nn.Linear(dim, inner)
        self.v_proj = nn.Linear(dim, inner)
        self.out_proj = nn.Linear(inner, dim)
        self.scale = (inner // num_heads) ** -0.5
        self.fused_attn = bool(fused_attn)

    def _heads(self, x: Tensor) -> Tensor:
        b, n, c = x.shape
        return x.view(b, n, self.num_heads, c // self.num_heads).transpose(1, 2)  # (B, H, N, c)

    def forward(self, q: Tensor, k: Tensor, v: Tensor) -> Tensor:
        q, k, v = self._heads(self.q_proj(q)), self._heads(self.k_proj(k)), self._heads(self.v_proj(v))
        if use_sdpa(self.fused_attn):
            out = F.scaled_dot_product_attention(q, k, v, scale=self.scale)
        else:
            out = attention_equation(q, k, v, scale=self.scale)
        b, h, n, c = out.shape
        return self.out_proj(out.transpose(1, 2).reshape(b, n, h * c))


class MLPBlock(nn.Module):
    def __init__(self, dim: int, hidden: int, act: type[nn.Module] = nn.ReLU) -> None:
        super().__init__()
        self.lin1 = nn.Linear(dim, hidden)
        self.lin2 = nn.Linear(hidden, dim)
        self.act = act()

    def forward(self, x: Tensor) -> Tensor:
        return self.lin2(self.act(self.lin1(x)))


class TwoWayBlock(nn.Module):
    """Token self-attention, token->image and image->token cross-attention, token MLP."""

    def __init__(self, dim: int, num_heads: int, mlp_dim: int, *, skip_first_pe: bool, eps: float,
                 downsample: int = 2) -> None:
        super().__init__()
        self.self_attn = PromptAttention(dim, num_heads)
        self.norm1 = nn.LayerNorm(dim, eps=eps)
        self.cross_attn_token_to_image = PromptAttention(dim, num_heads, downsample)
        self.norm2 = nn.LayerNorm(dim, eps=eps)
        self.mlp = MLPBlock(dim, mlp_dim)
        self.norm3 = nn.LayerNorm(dim, eps=eps)
        self.norm4 = nn.LayerNorm(dim, eps=eps)
        self.cross_attn_image_to_token = PromptAttention(dim, num_heads, downsample)
        self.skip_first_pe = skip_first_pe

    def forward(self, queries: Tensor, keys: Tensor, query_pe: Tensor, key_pe: Tensor) -> tuple[Tensor, Tensor]:
        if self.skip_first_pe:
            queries = self.self_attn(queries, queries, queries)
        else:
            q = queries + query_pe
            queries = queries + self.self_attn(q, q, queries)
        queries = self.norm1(queries)
        q, k = queries + query_pe, keys + key_pe
        queries = self.norm2(queries + self.cross_attn_token_to_image(q, k, keys))
        queries = self.norm3(queries + self.mlp(queries))
        q, k = queries + query_pe, keys + key_pe
        keys = self.norm4(keys + self.cross_attn_image_to_token(k, q, queries))
        return queries, keys


class TwoWayTransformer(nn.Module):
    def __init__(self, dim: int, depth: int, num_heads: int, mlp_dim: int, eps: float = 1e-5) -> None:
        super().__init__()
        self.layers = nn.ModuleList(TwoWayBlock(dim, num_heads, mlp_dim, skip_first_pe=i == 0, eps=eps)
                                    for i in range(depth))
        self.final_attn_token_to_image = PromptAttention(dim, num_heads, 2)
        self.norm_final_attn = nn.LayerNorm(dim)

    def forward(self, image: Tensor, image_pe: Tensor, tokens: Tensor) -> tuple[Tensor, Tensor]:
        keys = image.flatten(2).transpose(1, 2)  # (B, hw, C)
        key_pe = image_pe.flatten(2).transpose(1, 2)
        queries = tokens
        for layer in self.layers:
            queries, keys = layer(queries, keys, tokens, key_pe)
        q, k = queries + tokens, keys + key_pe
        queries = self.norm_final_attn(queries + self.final_attn_token_to_image(q, k, keys))
        return queries, keys


class MLP(nn.Module):
    def __init__(self, dim: int, hidden: int, out: int, depth: int) -> None:
        super().__init__()
        dims = [dim] + [hidden] * (depth - 1)
        self.layers = nn.ModuleList(nn.Linear(a, b) for a, b in zip(dims, [*dims[1:], out], strict=True))

    def forward(self, x: Tensor) -> Tensor:
        for i, layer in enumerate(self.layers):
            x = layer(x)
            if i < len(self.layers) - 1:
                x = F.relu(x)
        return x


class MaskDecoder(nn.Module):
    """Two-way transformer over (IoU token, mask tokens, prompt tokens) and the image, then
    hypernetwork masks at 4x the embedding resolution and an IoU head."""

    def __init__(self, dim: int, *, depth: int = 2, num_heads: int = 8, mlp_dim: int = 2048,
                 num_multimask: int = 3, iou_hidden: int = 256, eps: float = 1e-5) -> None:
        super().__init__()
        self.num_mask_tokens = num_multimask + 1
        self.transformer = TwoWayTransformer(dim, depth, num_heads, mlp_dim, eps=eps)
        self.iou_token = nn.Embedding(1, dim)
        self.mask_tokens = nn.Embedding(self.num_mask_tokens, dim)
        self.output_upscaling = nn.Sequential(
            nn.ConvTranspose2d(dim, dim // 4, 2, 2), LayerNorm2d(dim // 4), nn.GELU(),
            nn.ConvTranspose2d(dim // 4, dim // 8, 2, 2), nn.GELU())
        self.output_hypernetworks_mlps = nn.ModuleList(MLP(dim, dim, dim // 8, 3) for _ in range(self.num_mask_tokens))
        self.iou_prediction_head = MLP(dim, iou_hidden, self.num_mask_tokens, 3)

    def forward(self, image: Tensor, image_pe: Tensor, sparse: Tensor, dense: Tensor,
                multimask: bool) -> tuple[Tensor, Tensor]:
        """image Tensor[B, C, h, w]; image_pe Tensor[C, h, w]; sparse Tensor[P, T, C]; dense
        Tensor[C] (the no-mask embedding) -> (masks Tensor[B, P, M, 4h, 4w], iou Tensor[B, P, M])."""
        b, c, h, w = image.shape
        p = sparse.shape[0]
        out_tokens = torch.cat([self.iou_token.weight, self.mask_tokens.weight], dim=0)  # (1 + K, C)
        tokens = torch.cat([out_tokens.expand(p, -1, -1), sparse.to(out_tokens.dtype)], dim=1)  # (P, T', C)
        tokens = tokens.repeat(b, 1, 1)  # (B*P, T', C): image-major
        src = (image + dense.view(1, c, 1, 1)).repeat_interleave(p, dim=0)  # (B*P, C, h, w)
        pos = image_pe.unsqueeze(0).expand(b * p, -1, -1, -1)
        hs, src = self.transformer(src, pos, tokens)
        iou_out, mask_out = hs[:, 0], hs[:, 1:1 + self.num_mask_tokens]
        up = self.output_upscaling(src.transpose(1, 2).reshape(b * p, c, h, w))  # (B*P, C/8, 4h, 4w)
        hyper = torch.stack([mlp(mask_out[:, i]) for i, mlp in enumerate(self.output_hypernetworks_mlps)], dim=1)
        _, cu, hu, wu = up.shape
        masks = (hyper @ up.view(b * p, cu, hu * wu)).view(b, p, -1, hu, wu)
        iou = self.iou_prediction_head(iou_out).view(b, p, -1)
        sl = slice(1, None) if multimask else slice(0, 1)
        return masks[:, :, sl], iou[:, :, sl]


class PromptPath(nn.Module):
    """Holder of the prompt encoder and mask decoder of one configuration (``SamNet`` takes both)."""

    def __init__(self, dim: int = 256, *, depth: int = 2, num_heads: int = 8, mlp_dim: int = 2048,
                 iou_hidden: int = 256, mask_chans: int = 16) -> None:
        super().__init__()
        self.prompt_encoder = PromptEncoder(dim, mask_chans)
        self.mask_decoder = MaskDecoder(dim, depth=depth, num_heads=num_heads, mlp_dim=mlp_dim, iou_hidden=iou_hidden)
