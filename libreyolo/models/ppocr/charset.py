"""Character dictionaries of the recogniser: the class names of a PP-OCR model are its characters
(class id ``i`` is CTC index ``i + 1``; index 0 is the blank). The bundled dictionary is printable
ASCII (digits, letters, punctuation, space: 95 characters); a PaddleOCR dictionary file (one
character per line, e.g. ``ppocr_keys_v1.txt``) is read by :func:`read_dict` and passed as ``names``.
"""

from __future__ import annotations

from ...data.ocr import BUNDLED, read_dict

__all__ = ["BUNDLED", "read_dict", "default_names"]


def default_names(nc: int) -> dict[int, str]:
    """``nc`` characters of the bundled dictionary (all 95 for ``nc`` 80, the library's default class
    count, or 95); beyond 95 the extra classes are named ``<i>``.

    Example:
        >>> len(default_names(80)), default_names(3)
        (95, {0: '0', 1: '1', 2: '2'})
    """
    if nc in (80, len(BUNDLED)):
        return dict(enumerate(BUNDLED))
    return dict(enumerate(list(BUNDLED[:nc]) + [f"<{i}>" for i in range(len(BUNDLED), nc)]))
