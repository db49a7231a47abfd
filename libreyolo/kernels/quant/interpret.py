"""Test probe: were the quantization Triton kernels defined in interpreter mode?

Kept out of :mod:`.platform` (which the kernel modules import) so that the probe's import of
the kernels is no cycle: ``interpret -> simulate.triton_fake_quant -> platform``.
"""

from __future__ import annotations

from .platform import interpreting


def kernels_interpreted() -> bool:
    """The quantization Triton kernels were defined in interpreter mode (imports them; for tests)."""
    try:
        from triton.runtime.interpreter import InterpretedFunction

        from .simulate import triton_fake_quant
    except ImportError:
        return False
    return isinstance(triton_fake_quant._fake_quant_fwd, InterpretedFunction) and interpreting()
