"""Declaration of the in-tree op slots: reference implementations and provider modules.

Provider modules are imported on first use of their slot, never under LIBREYOLO_KERNELS=off.
References are imported lazily through small trampolines so that ``import libreyolo.kernels``
stays cheap.
"""

from __future__ import annotations

from .registry import define_slot

# Each slot is declared by the module that owns its reference (see quant/ and layers/), through
# ``define_slot``; this module lists them in one place so ``active()`` shows every slot.
