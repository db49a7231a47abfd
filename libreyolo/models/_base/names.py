"""Class names as a model keeps them: ``{0: name0, ..., nc-1: name}``."""

from __future__ import annotations

from ...errors import ConfigError


def normalise_names(names: dict[int, str] | list[str] | None, nc: int) -> dict[int, str]:
    if names is None:
        return {i: f"class{i}" for i in range(nc)}
    if isinstance(names, (list, tuple)):
        names = dict(enumerate(names))
    if not isinstance(names, dict):
        raise ConfigError(f"names must be a list or dict, got {type(names).__name__}")
    names = {int(k): str(v) for k, v in names.items()}
    if sorted(names) != list(range(nc)):
        raise ConfigError(f"names must cover class ids 0..{nc - 1}, got {len(names)} entries")
    return names
