from .family import Family

__all__ = ["Family"]
