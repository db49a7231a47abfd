"""The YOLOv9 (GELAN) size table, :mod:`libreyolo.models._gelan.variants`, re-exported."""

from .._gelan.variants import VARIANTS, ELANArgs, YOLO9Variant

__all__ = ["VARIANTS", "ELANArgs", "YOLO9Variant"]
