"""The fused-attention policy (SPEC K-9).

Stock PyTorch ``scaled_dot_product_attention`` (SDPA) needs no optional dependency, so whether
it runs is a matter of policy, not availability:

* CUDA-graph capture never uses it, and export keeps the primitive equation
  (``matmul -> softmax -> matmul``): the default ONNX opset has no SDPA symbolic and
  ``torch.jit.trace`` feeds TorchScript, CoreML and NCNN. ``torch.export`` counts as export.
* ``torch.compile`` (dynamo) is deliberately *not* gated: it lowers SDPA better than the hand
  equation.
* A module opts in through its ``fused_attn`` flag. The flag defaults to off unless a family
  cleared the byte-exact parity bar with SDPA and turns it on.

Note that a module with ``fused_attn=True`` therefore runs SDPA eagerly and the equation inside
a graph; such a family only claims CUDA-graph parity if both paths agree bit for bit.
"""

from __future__ import annotations

import logging

from torch import nn

from ..context import is_capturing, is_compiling, is_exporting, is_onnx_exporting, is_tracing

logger = logging.getLogger(__name__)


def sdpa_allowed() -> bool:
    """True when SDPA may run now: not capturing a CUDA graph, not tracing with
    ``torch.jit.trace``, not in ONNX export, not in ``torch.export``. Dynamo compilation is
    allowed (inside it only the export probes are consulted, all of them dynamo-safe)."""
    if is_compiling():
        return not (is_exporting() or is_onnx_exporting())
    return not (is_tracing() or is_onnx_exporting() or is_exporting() or is_capturing())


def use_sdpa(fused_attn: bool) -> bool:
    """The decision for one call of a module whose flag is ``fused_attn``."""
    return bool(fused_attn) and sdpa_allowed()


def fused_attention_modules(model: nn.Module) -> list[nn.Module]:
    """Every sub-module (``model`` included) that carries a boolean ``fused_attn`` attribute."""
    return [m for m in model.modules() if isinstance(getattr(m, "fused_attn", None), bool)]


def set_fused_attention(model: nn.Module, *, enabled: bool = True) -> int:
    """Set ``fused_attn = enabled`` on every module of ``model`` that has the flag.

    Returns the number of modules that carry the flag (all of them now equal ``enabled``); 0
    means the model has no attention layer governed by the policy.

    Example:
        >>> from libreyolo.kernels.attention import set_fused_attention
        >>> from libreyolo.layers.attention import Attention
        >>> set_fused_attention(Attention(dim=64, num_heads=4), enabled=True)
        1
    """
    if not isinstance(model, nn.Module):
        from ...errors import ConfigError

        raise ConfigError(
            f"set_fused_attention expects a torch.nn.Module, got {type(model).__name__}; "
            "pass the network (e.g. model.model), not a wrapper object"
        )
    modules = fused_attention_modules(model)
    for module in modules:
        module.fused_attn = bool(enabled)
    logger.debug("set_fused_attention(enabled=%s): %d modules", enabled, len(modules))
    return len(modules)
