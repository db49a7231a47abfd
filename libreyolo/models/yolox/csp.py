"""YOLOX's CSPDarknet blocks. They are shared with PicoDet and live in
:mod:`libreyolo.layers.csp`; this module keeps the import path."""

from __future__ import annotations

from ...layers.csp import CSPBottleneck, CSPLayer

__all__ = ["CSPBottleneck", "CSPLayer"]
