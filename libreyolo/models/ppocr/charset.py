"""Character dictionaries of the recogniser: the class names of a PP-OCR model are its characters
(class id ``i`` is CTC index ``i + 1``; index 0 is the blank).

The bundled dictionary is printable ASCII (digits, letters, punctuation, space): 95 characters.
A PaddleOCR dictionary file (one character per line, e.g. ``ppocr_keys_v1.txt``; PaddleOCR appends
a space when ``use_space_char`` is set) is read by :func:`read_dict` and passed as ``names``.
"""

from __future__ import annotations

import string
from pathlib import Path

from ...errors import ConfigError

BUNDLED: tuple[str, ...] = tuple(string.digits + string.ascii_lowercase + string.ascii_uppercase
                                 + string.punctuation + " ")


def read_dict(path: str | Path, *, space: bool = True) -> list[str]:
    """The characters of a dictionary file, one per line, plus ``" "`` when ``space`` (and absent).

    Example:
        >>> import tempfile; p = Path(tempfile.mkdtemp()) / "keys.txt"; _ = p.write_text("a\\nb\\n")
        >>> read_dict(p)
        ['a', 'b', ' ']
    """
    p = Path(path).expanduser()
    try:
        lines = p.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as e:
        raise ConfigError(f"cannot read the character dictionary {p}: {e}") from e
    chars = [ln.rstrip("\r\n") for ln in lines if ln.rstrip("\r\n") != ""]
    if not chars:
        raise ConfigError(f"character dictionary {p} is empty: give one character per line")
    if space and " " not in chars:
        chars.append(" ")
    return chars


def default_names(nc: int) -> dict[int, str]:
    """``nc`` characters of the bundled dictionary (all of it for ``nc`` 80, the library default
    class count, or 95); beyond 95 the extra classes are named ``<i>``."""
    chars = list(BUNDLED) if nc in (80, len(BUNDLED)) else list(BUNDLED[:nc]) + [f"<{i}>" for i in range(len(BUNDLED), nc)]
    return dict(enumerate(chars))
