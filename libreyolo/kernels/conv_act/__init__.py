"""The ``bias_act`` slot: a convolution's bias add and SiLU in one pass over its output.

A fused (BatchNorm-folded) ``Conv2d -> SiLU`` pair runs as three kernels on CUDA: the cuDNN
convolution, then ATen's bias add (``output.add_(bias)``, a broadcasting kernel: cuDNN's call
takes no bias) and the SiLU. In a captured yolo9-t those bias adds were about a fifth of the
replay's GPU time (``benchmarks/results/profile``). ``bias_act(y, bias)`` does the last two in one
kernel, in place on ``y``:

    y <- silu(round_y(y + bias))        # per channel c of Tensor[B, C, H, W]

where ``round_y`` rounds the float32 sum to ``y``'s dtype as ATen's in-place add does, and SiLU
is ``v / (1 + exp(-v))`` in float32 as ATen's kernel computes it: the provider is meant to be the
reference bit for bit, and the GPU tests check that it is.

* reference (:func:`bias_act_reference`): exactly the two ATen calls a conv with bias + SiLU
  makes, portable everywhere;
* ``"triton"`` (:mod:`.bias_act_triton`): the fused kernel, for CUDA tensors in NCHW or
  channels-last layout (CPU tensors under ``TRITON_INTERPRET=1`` when asked for by name).

Who calls it: :func:`libreyolo.layers.conv.graph_bias_act` turns it on while a family that opted
in (``Family.GRAPH_BIAS_ACT``) is warmed up and captured for a prediction graph; eager
prediction keeps ATen's kernels (a Triton launch costs more host time than the kernel saves when
nothing is captured).
"""

from __future__ import annotations

import torch  # noqa: F401 - the doctest uses it
import torch.nn.functional as F
from torch import Tensor

from ..registry import define_slot

BIAS_ACT = "bias_act"
PROVIDERS = ("libreyolo.kernels.conv_act.bias_act_triton",)


def bias_act_reference(y: Tensor, bias: Tensor) -> Tensor:
    """``silu(y + bias)`` in place on ``y`` (Tensor[B, C, H, W]; bias Tensor[C]), as the two ATen
    kernels a convolution with bias followed by an in-place SiLU runs.

    Example:
        >>> y = torch.zeros(1, 2, 1, 1)
        >>> bias_act_reference(y, torch.tensor([0.0, 1.0])).flatten().tolist()
        [0.0, 0.7310585975646973]
    """
    y.add_(bias.to(y.dtype).view(1, -1, *([1] * (y.dim() - 2))))
    return F.silu(y, inplace=True)


define_slot(BIAS_ACT, reference=bias_act_reference, providers=PROVIDERS)

__all__ = ["BIAS_ACT", "PROVIDERS", "bias_act_reference"]
