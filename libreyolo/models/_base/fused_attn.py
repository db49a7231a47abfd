"""The ``fused_attn`` architecture option of the attention families (SPEC K-9).

A family whose attention layers carry the ``fused_attn`` flag (:mod:`libreyolo.kernels.attention`)
mixes :class:`FusedAttentionOption` in front of its family base and declares its default in
``FUSED_ATTN_DEFAULT``. Then ``model.arch`` is ``{}`` while every attention layer is at the
default and ``{"fused_attn": <other value>}`` otherwise, so a checkpoint saved the other way loads
the other way, the parity harness keys those rows apart (``parity_predict.py --arch ...``), and a
head rebuilt for a new class count keeps the setting (``build_net`` takes ``fused_attn``). The
weights are the same either way; a mixed state (some layers on, some off) reads as the default.
"""

from __future__ import annotations

from typing import Any, ClassVar

from torch import nn

from ...kernels.attention import fused_attention_modules, set_fused_attention


class FusedAttentionOption:
    """``arch`` / ``set_arch`` over the ``fused_attn`` flags of ``self.net`` (module docstring).

    Example:
        >>> from libreyolo.registry import families
        >>> model = families()["deit"](size="t", nc=3)
        >>> model.arch, model.FUSED_ATTN_DEFAULT
        ({}, True)
        >>> model.set_arch(fused_attn=False); model.arch
        {'fused_attn': False}
    """

    FUSED_ATTN_DEFAULT: ClassVar[bool] = False
    net: nn.Module

    @property
    def arch(self) -> dict[str, Any]:
        """``{}`` at the default, ``{"fused_attn": not FUSED_ATTN_DEFAULT}`` when every layer differs."""
        flags = [m.fused_attn for m in fused_attention_modules(self.net)]
        other = not self.FUSED_ATTN_DEFAULT
        return {"fused_attn": other} if flags and all(f is other for f in flags) else {}

    def cuda_graph_refusal(self) -> str | None:
        """With fused attention on, eager runs SDPA while a capture runs the equation (SPEC K-9), so
        a replay would not equal the eager contract: prediction graphs are refused unless the
        family's default is fused (its flag then already rests on fused rows).

        Example:
            >>> from libreyolo.models.swin.family import Swin
            >>> model = Swin(size="t", nc=3)
            >>> model.cuda_graph_refusal() is None
            True
            >>> model.set_arch(fused_attn=True); "fused_attn" in model.cuda_graph_refusal()
            True
        """
        if self.FUSED_ATTN_DEFAULT or not any(m.fused_attn for m in fused_attention_modules(self.net)):
            return None
        return ("fused_attn=True: eager attention runs SDPA while a CUDA graph captures the equation, so a "
                "replay would not equal eager (SPEC K-9); set_arch(fused_attn=False) to use graphs")

    def set_arch(self, *, fused_attn: bool | None = None) -> None:
        """Turn fused attention on or off in every attention layer, in place (weights kept);
        ``None`` restores the family default. The same as ``set_fused_attention(model.net,
        enabled=...)``; captured graphs do not depend on it (capture always runs the equation)."""
        on = self.FUSED_ATTN_DEFAULT if fused_attn is None else bool(fused_attn)
        set_fused_attention(self.net, enabled=on)
