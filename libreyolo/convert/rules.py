"""Re-export of the converters' shared tensor helpers, which live in
:mod:`libreyolo.models._base.convert_rules` (below the families, so they import no upper floor)."""

from __future__ import annotations

from ..models._base.convert_rules import COUNTER, base_arch, fit, fold_bn_eps, rename_all

__all__ = ["COUNTER", "base_arch", "fit", "fold_bn_eps", "rename_all"]
