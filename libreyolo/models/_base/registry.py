"""The table of registered families (name -> class) and :func:`register_family`.

``libreyolo/models/__init__.py`` registers the built-in families with one explicit line each;
lookups by name, weights name or checkpoint metadata are :mod:`libreyolo.registry`, which sits
above the models and imports them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ...errors import ConfigError

if TYPE_CHECKING:
    from .family import Family

FAMILIES: dict[str, type[Family]] = {}


def register_family(cls: type[Family]) -> type[Family]:
    """Add a family class; registering a second class under the same name raises."""
    name = cls.FAMILY
    if name in FAMILIES and FAMILIES[name] is not cls:
        raise ConfigError(f"family {name!r} is registered twice ({FAMILIES[name]} and {cls})")
    FAMILIES[name] = cls
    return cls
