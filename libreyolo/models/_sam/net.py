"""The SAM network: normalisation, an image encoder (ViT or TinyViT) and the prompt path.

``encode(x)``: Tensor[B, 3, H, W] in [0, 1] -> image embeddings Tensor[B, C, H/16, W/16] (the
capturable stage of the seam). ``decode(emb, prompts)``: -> (mask logits Tensor[B, P, M, H/4,
W/4], IoU predictions Tensor[B, P, M], the embeddings again), eager per prompt. ``forward(x)``
chains both with the default prompt (one foreground point at the input's centre): what a CUDA
graph of the whole network or an ONNX export holds.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from .prompt import PromptPath, Prompts, centre_prompt

PIXEL_MEAN = (123.675, 116.28, 103.53)  # the reference's ImageNet statistics in 0..255
PIXEL_STD = (58.395, 57.12, 57.375)
STRIDE = 16  # embedding stride of both image encoders


class SamNet(nn.Module):
    def __init__(self, image_encoder: nn.Module, prompt: PromptPath) -> None:
        super().__init__()
        self.image_encoder = image_encoder
        self.prompt_encoder = prompt.prompt_encoder
        self.mask_decoder = prompt.mask_decoder
        self.register_buffer("pixel_mean", torch.tensor(PIXEL_MEAN).view(1, 3, 1, 1) / 255.0, persistent=False)
        self.register_buffer("pixel_std", torch.tensor(PIXEL_STD).view(1, 3, 1, 1) / 255.0, persistent=False)

    def encode(self, x: Tensor) -> Tensor:
        return self.image_encoder((x - self.pixel_mean.to(x.dtype)) / self.pixel_std.to(x.dtype))

    def decode(self, emb: Tensor, prompts: Prompts | None = None) -> tuple[Tensor, Tensor, Tensor]:
        hw = (int(emb.shape[2]) * STRIDE, int(emb.shape[3]) * STRIDE)
        if prompts is None:
            prompts = centre_prompt(hw, emb.device)
        sparse = self.prompt_encoder.sparse(prompts.to(emb.device), hw).to(emb.dtype)
        pe = self.prompt_encoder.pe_layer.grid(int(emb.shape[2]), int(emb.shape[3])).to(emb.dtype)
        dense = self.prompt_encoder.no_mask_embed.weight[0].to(emb.dtype)
        masks, iou = self.mask_decoder(emb, pe, sparse, dense, prompts.multimask)
        return masks, iou, emb

    def forward(self, x: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        return self.decode(self.encode(x))
