"""RTMDet-Ins raw outputs -> detections with their mask kernels, and masks (eager; never captured).

:func:`postprocess` selects detections as the RTMDet detector does
(:func:`libreyolo.models._rtmdet.postprocess.select`: multi-label candidates above ``conf``,
distance decode, NMS, ``max_det``), with the boxes clipped to the network input before NMS as the
reference does, and carries each kept detection's grid point, stride and dynamic-kernel
parameters along. :func:`assemble_masks` is the instance head's dynamic
convolution for one image: per detection, its three 1x1 layers (ReLU between) applied to the mask
features concatenated with the coordinates relative to the detection's point, giving mask logits
at stride 8, bilinearly upsampled to stride 4, sigmoid.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ...errors import ConfigError
from .._rtmdet.postprocess import MAX_CANDIDATES, grid_points, select
from .nn import DYCONV_CHANNELS, NUM_PARAMS, PARAM_SPLITS

PRIOR_COLS = 3  # grid point x, y (input pixels) and its stride, after the 6 detection columns
MASK_STRIDE = 4  # masks come out at a quarter of the input (the segment task's mask resolution)


def postprocess(raw: list[Tensor] | tuple[Tensor, ...], *, net: nn.Module, conf: float, iou: float,
                classes: list[int] | None, max_det: int, agnostic: bool,
                max_candidates: int = MAX_CANDIDATES) -> list[Tensor]:
    """raw (the network output: three levels, then the mask features) -> per image
    Tensor[n, 6 + 3 + 169] float32: x1, y1, x2, y2 (network-input pixels), score, class id, the
    detection's grid point x, y and stride, then its dynamic-kernel parameters; rows by decreasing
    score, ``n <= max_det``.

    Example:
        >>> from libreyolo.models.rtmdet_ins.nn import build_rtmdet_ins
        >>> net = build_rtmdet_ins(size="t", nc=2).eval()
        >>> with torch.no_grad():
        ...     dets = postprocess(net(torch.rand(1, 3, 64, 64)), net=net, conf=0.0, iou=0.7, classes=None,
        ...                        max_det=5, agnostic=False)
        >>> dets[0].shape
        torch.Size([5, 178])
    """
    nc, strides = int(net.nc), tuple(int(s) for s in net.strides)
    *feats, mask_feat = list(raw)
    want = 4 + nc + NUM_PARAMS
    if len(feats) != len(strides) or any(f.dim() != 4 or f.shape[1] != want for f in feats) or mask_feat.dim() != 4:
        raise ConfigError(f"the RTMDet-Ins postprocess expects {len(strides)} levels of (B, {want}, h, w) and the mask "
                          f"features (B, {int(net.num_prototypes)}, h, w); got {[tuple(f.shape) for f in raw]}: pass "
                          "the network's raw output list unchanged")
    input_hw = (feats[0].shape[2] * strides[0], feats[0].shape[3] * strides[0])
    kept = select(feats, net=net, conf=conf, iou=iou, classes=classes, max_det=max_det, agnostic=agnostic,
                  max_candidates=max_candidates, clip_hw=input_hw)  # boxes clipped to the input, as the reference
    points, stride_t = grid_points([tuple(f.shape[2:]) for f in feats], strides, device=mask_feat.device)
    kernels = torch.cat([f[:, 4 + nc:].flatten(2) for f in feats], 2)  # (B, NUM_PARAMS, A)
    out = []
    for b, (det, a_idx) in enumerate(kept):
        prior = torch.cat((points[a_idx], stride_t[a_idx, None]), 1)  # (n, 3)
        out.append(torch.cat((det, prior, kernels[b][:, a_idx].T.float()), 1))
    return out


def dynamic_mask_logits(mask_feat: Tensor, kernels: Tensor, points: Tensor, strides: Tensor, *,
                        feat_stride: int) -> Tensor:
    """The dynamic convolution of the instance head.

    mask_feat (Tensor[P, h, w]) features at ``feat_stride``; kernels (Tensor[n, 169]) per
    instance, laid out as :data:`~libreyolo.models.rtmdet_ins.nn.PARAM_SPLITS` (weights of the
    three layers, then their biases); points (Tensor[n, 2]) the instances' grid points in input
    pixels; strides (Tensor[n]) their levels' strides. The input of the first layer is the relative
    coordinates ``(point - pixel) / (8 * stride)`` (x then y, pixels at the grid corners
    ``col * feat_stride``) followed by the P features. Returns mask logits Tensor[n, h, w] float32.

    Example:
        >>> k = torch.zeros(1, 169); k[0, -1] = 2.0  # all weights 0, last bias 2
        >>> dynamic_mask_logits(torch.rand(8, 4, 4), k, torch.zeros(1, 2), torch.ones(1), feat_stride=8)[0, 0, 0]
        tensor(2.)
    """
    with torch.autocast(device_type=mask_feat.device.type, enabled=False):  # float32 even inside an AMP loss
        return _dynamic_mask_logits(mask_feat.float(), kernels.float(), points.float(), strides.float(),
                                    feat_stride=feat_stride)


def _dynamic_mask_logits(mask_feat: Tensor, kernels: Tensor, points: Tensor, strides: Tensor, *,
                         feat_stride: int) -> Tensor:
    n = kernels.shape[0]
    p, h, w = mask_feat.shape
    feat = mask_feat.reshape(p, h * w)
    if n == 0:
        return feat.new_zeros((0, h, w))
    ys, xs = torch.meshgrid(torch.arange(h, device=feat.device, dtype=torch.float32) * feat_stride,
                            torch.arange(w, device=feat.device, dtype=torch.float32) * feat_stride, indexing="ij")
    grid = torch.stack((xs.reshape(-1), ys.reshape(-1)), 0)  # (2, hw)
    rel = (points[:, :, None] - grid[None]) / (strides[:, None, None] * 8)  # (n, 2, hw)
    x = torch.cat((rel, feat[None].expand(n, p, h * w)), 1)  # (n, 2 + P, hw)
    weights, biases = PARAM_SPLITS
    params = kernels.split((*weights, *biases), 1)
    n_layers = len(weights)
    for i in range(n_layers):
        c_out = DYCONV_CHANNELS if i < n_layers - 1 else 1
        wt = params[i].reshape(n, c_out, -1)  # (n, out, in)
        x = torch.baddbmm(params[n_layers + i][:, :, None], wt, x)  # (n, out, hw)
        if i < n_layers - 1:
            x = F.relu(x)
    return x.reshape(n, h, w)


def assemble_masks(mask_feat: Tensor, det: Tensor, *, feat_stride: int = 8) -> Tensor:
    """One image's masks at stride 4: mask_feat (Tensor[8, h, w] at ``feat_stride``), det
    (Tensor[n, 178] from :func:`postprocess`) -> Tensor[n, h * feat_stride / 4, w * feat_stride / 4]
    float32 probabilities (logits upsampled bilinearly, then sigmoid; not cropped to the box).

    Example:
        >>> det = torch.zeros(1, 178); det[0, 8] = 8.0  # point (0, 0), stride 8, zero kernel
        >>> assemble_masks(torch.zeros(8, 2, 2), det).shape
        torch.Size([1, 4, 4])
    """
    if det.shape[1] != 6 + PRIOR_COLS + NUM_PARAMS:
        raise ConfigError(f"detections carry {det.shape[1]} columns; RTMDet-Ins masks need 6 + {PRIOR_COLS} + "
                          f"{NUM_PARAMS} (boxes, the grid point and stride, the kernel parameters)")
    det = det.float()
    logits = dynamic_mask_logits(mask_feat, det[:, 6 + PRIOR_COLS:], det[:, 6:8], det[:, 8], feat_stride=feat_stride)
    h, w = logits.shape[1:]
    scale = feat_stride // MASK_STRIDE
    if logits.shape[0] == 0:
        return logits.new_zeros((0, h * scale, w * scale))
    up = F.interpolate(logits[None], size=(h * scale, w * scale), mode="bilinear", align_corners=False)[0]
    return up.sigmoid()
