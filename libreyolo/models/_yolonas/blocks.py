"""The YOLO-NAS building blocks: the quantization-aware re-parameterisable conv (QARepVGG), the
residual bottleneck with a learnable shortcut weight, and the CSP layer built from them.

QARepVGG (Chu et al., *Make RepVGG Greater Again: A Quantization-aware Approach*,
arXiv:2212.01593, variant S4) trains three parallel branches whose sum goes through one BatchNorm
*after* the sum: a 3x3 conv with its own BatchNorm, a 1x1 conv with a bias (no BatchNorm, an
optional learnable scale ``alpha``) and the identity (no BatchNorm). Moving the normalisation
after the sum is what keeps the merged kernel's weight and activation ranges quantization
friendly. :meth:`QARepVGGBlock.fuse` merges the three branches and the post-sum BatchNorm into
one 3x3 conv with a bias (one way; the block cannot train its BatchNorms afterwards).

Submodule names follow the YOLO-NAS reference (super-gradients) so that its checkpoints map by
name (``branch_3x3.conv``, ``branch_3x3.bn``, ``branch_1x1``, ``post_bn``; ``cv1`` / ``cv2`` /
``alpha`` of a bottleneck; ``conv1`` .. ``conv3`` / ``bottlenecks`` of a CSP layer).
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ...layers.conv import BN_EPS, BN_MOMENTUM, ConvBNAct, bn_folded_kernel


def relu() -> nn.Module:
    """The activation of every YOLO-NAS block (ReLU, in place as the reference)."""
    return nn.ReLU(inplace=True)


class QARepVGGBlock(nn.Module):
    """``act(post_bn(bn(conv3x3(x)) + alpha * conv1x1(x) + x))`` (the identity term only when
    ``identity``; it needs ``c1 == c2`` and stride 1).

    x (Tensor[B, c1, H, W]) -> (Tensor[B, c2, H / s, W / s]). After :meth:`fuse` the block is
    ``act(conv(x))`` with ``conv`` one 3x3 Conv2d with a bias and the branch modules ``None``.

    Example:
        >>> m = QARepVGGBlock(8, 8).eval()
        >>> x = torch.rand(1, 8, 16, 16)
        >>> y = m(x); m.fuse()
        >>> torch.allclose(m(x), y, atol=1e-5)
        True
    """

    def __init__(self, c1: int, c2: int, *, s: int = 1, identity: bool = True, use_alpha: bool = False,
                 act: Callable[[], nn.Module] = relu) -> None:
        super().__init__()
        if identity and (c1 != c2 or s != 1):
            raise ValueError(f"QARepVGGBlock identity branch needs c1 == c2 and stride 1, got {c1}, {c2}, s={s}")
        self.c1, self.c2, self.stride = c1, c2, s
        self.branch_3x3: nn.Sequential | None = nn.Sequential()
        self.branch_3x3.add_module("conv", nn.Conv2d(c1, c2, 3, s, 1, bias=False))
        self.branch_3x3.add_module("bn", nn.BatchNorm2d(c2, eps=BN_EPS, momentum=BN_MOMENTUM))
        self.branch_1x1: nn.Conv2d | None = nn.Conv2d(c1, c2, 1, s, 0, bias=True)
        self.identity = identity
        # the 1x1 branch's learnable scale (PP-YOLOE+ style); YOLO-NAS builds its blocks without it
        self.alpha: nn.Parameter | None = nn.Parameter(torch.ones(1)) if use_alpha else None
        self.post_bn: nn.BatchNorm2d | None = nn.BatchNorm2d(c2, eps=BN_EPS, momentum=BN_MOMENTUM)
        self.conv: nn.Conv2d | None = None  # the merged kernel, set by fuse()
        self.act = act()

    def forward(self, x: Tensor) -> Tensor:
        if self.conv is not None:
            return self.act(self.conv(x))
        assert self.branch_3x3 is not None and self.branch_1x1 is not None and self.post_bn is not None
        y = self.branch_3x3(x)
        one = self.branch_1x1(x)
        y = y + (one if self.alpha is None else self.alpha * one)
        if self.identity:
            y = y + x
        return self.act(self.post_bn(y))

    @torch.no_grad()
    def merged_kernel(self) -> tuple[Tensor, Tensor]:
        """The single 3x3 kernel (Tensor[c2, c1, 3, 3]) and bias (Tensor[c2]) equal to the
        eval-mode branches and post-sum BatchNorm, computed in float64 where the device has it,
        returned in the weights' dtype."""
        assert self.branch_3x3 is not None and self.branch_1x1 is not None and self.post_bn is not None
        w3 = self.branch_3x3.conv.weight
        calc = torch.float32 if w3.device.type == "mps" else torch.float64
        k, b = bn_folded_kernel(w3.to(calc), None, self.branch_3x3.bn)  # (c2, c1, 3, 3), (c2,)
        k1 = F.pad(self.branch_1x1.weight.to(calc), [1, 1, 1, 1])
        b1 = self.branch_1x1.bias.to(calc) if self.branch_1x1.bias is not None else torch.zeros_like(b)
        a = self.alpha.to(calc) if self.alpha is not None else 1.0
        k = k + a * k1
        b = b + a * b1
        if self.identity:
            k[:, :, 1, 1] += torch.eye(self.c2, dtype=calc, device=k.device)
        k, b = bn_folded_kernel(k, b, self.post_bn)
        return k.to(w3.dtype), b.to(w3.dtype)

    @torch.no_grad()
    def fuse(self) -> None:
        """Replace the branches and the post-sum BatchNorm by one 3x3 conv in place (idempotent)."""
        if self.conv is not None:
            return
        assert self.branch_3x3 is not None
        src = self.branch_3x3.conv
        k, b = self.merged_kernel()
        fused = nn.Conv2d(self.c1, self.c2, 3, self.stride, 1, bias=True, device=k.device, dtype=k.dtype)
        fused.weight.copy_(k)
        fused.bias.copy_(b)
        fused.requires_grad_(src.weight.requires_grad)
        self.conv = fused
        self.branch_3x3 = self.branch_1x1 = self.post_bn = None
        self.alpha = None


BlockFactory = Callable[[int, int], nn.Module]


def qarepvgg_block(c1: int, c2: int) -> nn.Module:
    """The backbone's and up-path's bottleneck conv: a stride-1 QARepVGG block with identity."""
    return QARepVGGBlock(c1, c2, identity=True)


def conv3x3_block(c1: int, c2: int) -> nn.Module:
    """The down-path's bottleneck conv: a plain 3x3 conv + BatchNorm + ReLU."""
    return ConvBNAct(c1, c2, 3, act=relu())


class NASBottleneck(nn.Module):
    """Two stacked blocks with a residual ``alpha * x + cv2(cv1(x))`` (``alpha`` learnable, one
    scalar, starting at 1) when ``shortcut`` and the widths agree.

    x (Tensor[B, c, H, W]) -> (Tensor[B, c, H, W]).
    """

    def __init__(self, c1: int, c2: int, *, block: BlockFactory, shortcut: bool = True,
                 use_alpha: bool = True) -> None:
        super().__init__()
        self.cv1 = block(c1, c2)
        self.cv2 = block(c2, c2)
        self.add = shortcut and c1 == c2
        self.alpha: nn.Parameter | None = nn.Parameter(torch.ones(1)) if (use_alpha and self.add) else None

    def forward(self, x: Tensor) -> Tensor:
        y = self.cv2(self.cv1(x))
        if not self.add:
            return y
        return (x if self.alpha is None else self.alpha * x) + y


class NASCSPLayer(nn.Module):
    """Cross-stage layer: ``conv3(cat(bottleneck path, conv2(x)))`` where the bottleneck path is
    ``conv1(x)`` through ``n`` :class:`NASBottleneck` (with ``concat_intermediates`` every
    intermediate of that path, ``conv1(x)`` included, enters the concatenation, as YOLO-NAS M
    and L do in the backbone).

    x (Tensor[B, c1, H, W]) -> (Tensor[B, c2, H, W]).
    """

    def __init__(self, c1: int, c2: int, n: int, *, block: BlockFactory, hidden: int,
                 concat_intermediates: bool = False, shortcut: bool = True) -> None:
        super().__init__()
        self.conv1 = ConvBNAct(c1, hidden, 1, act=relu())
        self.conv2 = ConvBNAct(c1, hidden, 1, act=relu())
        self.concat_intermediates = concat_intermediates
        parts = 2 + (n if concat_intermediates else 0)
        self.conv3 = ConvBNAct(hidden * parts, c2, 1, act=relu())
        self.bottlenecks = nn.Sequential(*(NASBottleneck(hidden, hidden, block=block, shortcut=shortcut)
                                           for _ in range(n)))

    def forward(self, x: Tensor) -> Tensor:
        y = self.conv1(x)
        if self.concat_intermediates:
            ys = [y]
            for m in self.bottlenecks:
                ys.append(m(ys[-1]))
        else:
            ys = [self.bottlenecks(y)]
        return self.conv3(torch.cat((*ys, self.conv2(x)), 1))
