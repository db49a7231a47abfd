"""Build a SAM network of one size (:mod:`.variants`)."""

from __future__ import annotations

from .._sam.net import SamNet
from .._sam.prompt import PromptPath
from .nn import ViTImageEncoder
from .variants import VARIANTS


def build_sam(size: str) -> SamNet:
    img, dim, depth, heads, glob, win, out, dheads, dmlp, iouh = VARIANTS[size]
    enc = ViTImageEncoder(img_size=img, dim=dim, depth=depth, num_heads=heads, global_attn=glob, window=win,
                          out_chans=out)
    return SamNet(enc, PromptPath(out, num_heads=dheads, mlp_dim=dmlp, iou_hidden=iouh))
