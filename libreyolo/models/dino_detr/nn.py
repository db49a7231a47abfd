"""DINO network (Zhang et al., "DINO: DETR with Improved DeNoising Anchor Boxes", arXiv:2203.03605),
ResNet-50 4-scale.

Built from the pieces it shares with Deformable DETR (:mod:`libreyolo.models._detr.deformable`): the
frozen ResNet, the input projections + deformable encoder (6 layers, 4 levels, 4 points, post-norm)
and the decoder layer (self-attention, deformable cross-attention, FFN). DINO's own parts:

* FFN width 2048 and no dropout (the reference's ``DINO_4scale.py``); the encoder's sine position
  embedding has temperature 20 and no half-pixel offset (the reference's ``PositionEmbeddingSineHW``
  with ``normalize=True``);
* **mixed query selection**: every encoder token is scored as a proposal (``enc_output`` + norm,
  a class head and a box head on top of a per-level anchor of side ``0.05 * 2**level``); the top
  ``num_queries`` (900) tokens by best class score give the initial (detached) reference boxes,
  while the content queries stay learned (``tgt_embed``);
* each decoder layer's query position is an MLP (``ref_point_head``) of the sine embedding of its
  reference box; a final LayerNorm (``norm``) precedes the heads;
* **look forward twice**: layer ``i`` refines its (detached) reference box with the box head; the
  box it *outputs* is the box head applied to the normalised output on top of the *undetached*
  box of layer ``i - 1``, so layer ``i``'s loss also trains layer ``i - 1``;
* one class head and one box head shared by every decoder layer (the reference's default
  ``dec_pred_*_embed_share``), separate ones for the encoder proposals;
* **contrastive denoising** in training: positive and negative noised ground-truth queries,
  built by the shared :func:`~libreyolo.models._detr.denoising.build_denoising_group` (RT-DETR
  inherited it from DINO; DINO_4scale.py's settings: 100 denoising queries, label noise 0.5, box
  noise 0.4), the label embedding ``label_enc`` and the group attention mask.

Forward contract (as the other DETRs, SPEC G-9): eval ``net(x)`` -> ``(logits Tensor[B, Q, nc],
boxes Tensor[B, Q, 4] xyxy input pixels)``, Q = min(900, tokens); train ``net(x)`` -> the encoder
maps; the criterion runs ``net.decoder(maps, dn)`` eagerly and gets a
:class:`~libreyolo.models._detr.decoder.DecoderTrainOutput`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import Tensor, nn

from ...errors import ConfigError
from .._detr.common import MLP, inverse_sigmoid
from .._detr.decoder import DecoderTrainOutput, make_anchors
from .._detr.deformable import (
    DecoderLayer,
    DeformableDETRConfig,
    DeformableEncoder,
    DeformableNetBase,
    FrozenResNet,
)
from .._detr.denoising import DenoisingGroup, build_denoising_group


@dataclass(frozen=True, kw_only=True)
class DINOConfig(DeformableDETRConfig):
    """One size; defaults are the reference's R50 4-scale config (``DINO_4scale.py``)."""

    ffn: int = 2048
    num_queries: int = 900
    dropout: float = 0.0
    num_denoising: int = 100
    label_noise: float = 0.5
    box_noise: float = 0.4  # dn_box_noise_scale of DINO_4scale.py (RT-DETR uses 1.0)


class DINOEncoder(DeformableEncoder):
    """The Deformable DETR encoder with DINO's position embedding (temperature 20, no offset)."""

    POS_TEMPERATURE = 20.0
    POS_OFFSET = 0.0


def box_sine_embedding(boxes: Tensor, dim: int = 128, *, temperature: float = 10000.0) -> Tensor:
    """Sine embedding of normalised boxes, Tensor[..., 4] (cx, cy, w, h) -> Tensor[..., 4 * dim].

    Each coordinate ``c`` (times 2 pi) gives ``[sin(c / t_0), cos(c / t_1), sin(c / t_2), ...]``
    with ``t_i = temperature ** (2 floor(i / 2) / dim)``; the blocks are ordered y, x, w, h (the
    reference's ``gen_sineembed_for_position``). Computed in float32.
    """
    dim_t = torch.arange(dim, dtype=torch.float32, device=boxes.device)
    dim_t = temperature ** (2 * torch.div(dim_t, 2, rounding_mode="floor") / dim)
    b = boxes.float()
    # y, x, w, h by slicing (an index tuple would be a host tensor copied to the device on every
    # call: not allowed inside a CUDA-graph capture)
    p = torch.cat((b[..., 1:2], b[..., 0:1], b[..., 2:4]), dim=-1) * (2 * math.pi)
    p = p[..., None] / dim_t  # (..., 4, dim)
    emb = torch.stack((p[..., 0::2].sin(), p[..., 1::2].cos()), dim=-1).flatten(-2)
    return emb.flatten(-2).to(boxes.dtype)


class DINODecoder(nn.Module):
    """Mixed query selection, the decoder layers with look-forward-twice refinement, the heads
    and the denoising label embedding (module docs).

    forward(feats, dn=None): the encoder maps -> eval: (logits Tensor[B, Q, nc], boxes Tensor[B,
    Q, 4] normalised cxcywh) of the last layer; train: :class:`DecoderTrainOutput` (every layer;
    the selected proposals; the denoising queries when ``dn`` is given, see :meth:`make_denoising`).
    Inference has no host sync and fixed shapes (top-k with ``k = min(num_queries, S)``).
    """

    def __init__(self, *, nc: int, cfg: DINOConfig) -> None:
        super().__init__()
        d = cfg.hidden
        self.nc, self.hidden, self.num_queries, self.num_levels = nc, d, cfg.num_queries, cfg.num_levels
        self.num_denoising, self.label_noise, self.box_noise = cfg.num_denoising, cfg.label_noise, cfg.box_noise
        self.enc_output, self.enc_output_norm = nn.Linear(d, d), nn.LayerNorm(d)
        self.enc_class_embed = nn.Linear(d, nc)
        self.enc_bbox_embed = MLP(d, d, 4, num_layers=3)
        self.tgt_embed = nn.Embedding(cfg.num_queries, d)  # the content queries (mixed query selection)
        self.layers = nn.ModuleList(DecoderLayer(cfg) for _ in range(cfg.dec_layers))
        self.ref_point_head = MLP(2 * d, d, d, num_layers=2)
        self.norm = nn.LayerNorm(d)
        self.class_embed = nn.Linear(d, nc)  # shared by every layer
        self.bbox_embed = MLP(d, d, 4, num_layers=3)  # shared: refinement and outputs
        self.label_enc = nn.Embedding(nc + 1, d, padding_idx=nc) if cfg.num_denoising > 0 else None
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """Class biases at prior probability 0.01, box heads' last layer zero, content queries
        and encoder output projection Xavier/normal as the reference."""
        prior = -math.log((1 - 0.01) / 0.01)
        for head in (self.class_embed, self.enc_class_embed):
            nn.init.constant_(head.bias, prior)
        for mlp in (self.bbox_embed, self.enc_bbox_embed):
            nn.init.zeros_(mlp.layers[-1].weight)
            nn.init.zeros_(mlp.layers[-1].bias)
        nn.init.normal_(self.tgt_embed.weight)
        nn.init.xavier_uniform_(self.enc_output.weight)
        if self.label_enc is not None:
            with torch.no_grad():
                nn.init.normal_(self.label_enc.weight[:-1])

    def make_denoising(self, labels: list[Tensor], boxes: list[Tensor], *, num_queries: int,
                       max_gt_cap: int | None = None) -> DenoisingGroup | None:
        """Contrastive denoising queries for per-image ``labels`` / ``boxes`` (normalised cxcywh)."""
        if self.label_enc is None:
            return None
        return build_denoising_group(labels, boxes, nc=self.nc, num_queries=num_queries, class_embed=self.label_enc,
                                     num_denoising=self.num_denoising, label_noise=self.label_noise,
                                     box_noise=self.box_noise, max_gt_cap=max_gt_cap)

    def num_selected(self, feats: Sequence[Tensor]) -> int:
        return min(self.num_queries, sum(int(f.shape[-2]) * int(f.shape[-1]) for f in feats))

    def forward(self, feats: Sequence[Tensor], dn: DenoisingGroup | None = None) -> tuple[Tensor, Tensor] | DecoderTrainOutput:
        shapes = [(int(f.shape[-2]), int(f.shape[-1])) for f in feats]
        memory = torch.cat([f.flatten(2).transpose(1, 2) for f in feats], 1)  # (B, S, D)
        b, s, d = memory.shape
        k = min(self.num_queries, s)
        anchors, valid = make_anchors(shapes, device=memory.device, dtype=memory.dtype)
        out_memory = self.enc_output_norm(self.enc_output(memory.masked_fill(~valid, 0.0)))
        enc_logits = self.enc_class_embed(out_memory)  # (B, S, nc)
        enc_coord = self.enc_bbox_embed(out_memory) + anchors  # (B, S, 4) logits
        topk = enc_logits.max(-1).values.topk(k, dim=1).indices
        ref_unact = enc_coord.gather(1, topk[..., None].expand(b, k, 4))
        tgt = self.tgt_embed.weight[:k][None].expand(b, k, d)
        ref_in = ref_unact.detach()
        attn_mask, n_dn = None, 0
        if dn is not None:
            n_dn = dn.num_queries
            tgt = torch.cat([dn.query.to(tgt.dtype), tgt], 1)
            ref_in = torch.cat([dn.ref_unact.to(ref_in.dtype), ref_in], 1)
            attn_mask = dn.attn_mask
        logits, boxes = self._decode(tgt, ref_in.sigmoid(), memory, shapes, attn_mask)
        if not self.training:
            return logits[-1], boxes[-1]
        lg, bx = torch.stack(logits), torch.stack(boxes)
        enc_topk_logits = self.enc_class_embed(out_memory.gather(1, topk[..., None].expand(b, k, d)))
        return DecoderTrainOutput(
            logits=lg[:, :, n_dn:], boxes=bx[:, :, n_dn:], enc_logits=enc_topk_logits, enc_boxes=ref_unact.sigmoid(),
            dn_logits=lg[:, :, :n_dn] if dn is not None else None,
            dn_boxes=bx[:, :, :n_dn] if dn is not None else None, dn=dn,
        )

    def _decode(self, tgt: Tensor, ref: Tensor, memory: Tensor, shapes: list[tuple[int, int]],
                attn_mask: Tensor | None) -> tuple[list[Tensor], list[Tensor]]:
        """Layers with look-forward-twice refinement; eval keeps only the last layer's output."""
        b, n = ref.shape[:2]
        last = len(self.layers) - 1
        out_logits, out_boxes = [], []
        prev = ref  # the box the layer's output refines (undetached after the first layer)
        for i, layer in enumerate(self.layers):
            pos = self.ref_point_head(box_sine_embedding(ref, self.hidden // 2))
            tgt = layer(tgt, pos, ref[:, :, None].expand(b, n, self.num_levels, 4), memory, shapes, attn_mask)
            if self.training or i == last:
                hs = self.norm(tgt)
                out_logits.append(self.class_embed(hs))
                out_boxes.append((self.bbox_embed(hs) + inverse_sigmoid(prev)).sigmoid())
            if i < last:
                new_ref = (self.bbox_embed(tgt) + inverse_sigmoid(ref)).sigmoid()
                prev, ref = new_ref, new_ref.detach()
        return out_logits, out_boxes


class DINONet(DeformableNetBase):
    """Backbone + DINO encoder + DINO decoder; ``encode`` / ``trunk`` / ``decode`` / ``forward``
    from :class:`DeformableNetBase` (mode-dependent forward: module docs)."""

    def __init__(self, *, cfg: DINOConfig, nc: int) -> None:
        super().__init__()
        self.nc, self.cfg = nc, cfg
        self.backbone = FrozenResNet(depth=cfg.depth)
        self.encoder = DINOEncoder(self.backbone.out_channels, cfg)
        self.decoder = DINODecoder(nc=nc, cfg=cfg)
        self.strides = tuple(8 * 2**i for i in range(cfg.num_levels))


VARIANTS: dict[str, DINOConfig] = {"r50": DINOConfig()}
"""DINO-4scale with ResNet-50 (6 + 6 layers, 900 queries, 4 levels, FFN 2048)."""
PAPER_PARAMS_M = {"r50": 47.0}  # DINO paper, Table 1 / 2 (DINO-4scale R50: 47M)


def build_dino_detr(*, size: str, nc: int) -> DINONet:
    if size not in VARIANTS:
        raise ConfigError(f"dino_detr has no size {size!r}; sizes: {', '.join(VARIANTS)}")
    return DINONet(cfg=VARIANTS[size], nc=nc)
