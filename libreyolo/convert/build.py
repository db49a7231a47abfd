"""The family behind a weights name or file (what :func:`libreyolo.LibreYOLO` returns wraps it):
an untrained build of the family and size a name describes (``pretrained=False``), another
library's checkpoint converted on load, or a libreyolo checkpoint.

Example:
    >>> build_family("LibreYOLO9t.pt", pretrained=False, nc=3).nc
    3
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import torch

from ..errors import CheckpointError

if TYPE_CHECKING:
    from ..models._base.family import Family

INIT_SEED = 0  # the seed of an untrained build's initial weights (pretrained=False)


def build_family(name: str, *, pretrained: bool = True, nc: int | None = None,
                 names: dict[int, str] | list[str] | None = None) -> Family:
    """The family of the weights ``name`` (the search order of :func:`libreyolo.LibreYOLO`).

    ``pretrained=False`` builds the family and size the name describes with ``nc`` / ``names``
    classes (80 by default); its initial weights are drawn from :data:`INIT_SEED` under a forked
    RNG, so the same call gives the same network in every process and the caller's random stream
    is left as it was.

    Raises:
        CheckpointError: ``nc`` differs from the class count the checkpoint was trained with.
    """
    from ..io.checkpoint import model_from_checkpoint, read_checkpoint
    from ..io.weights import find_weights, hub_repo_weights, hub_snapshot_weights
    from ..registry import check_named_task, get_family, parse_weights_name
    from . import detect_format, load_foreign

    check_named_task(name)
    if not pretrained:
        parsed = parse_weights_name(name)
        cls = get_family(parsed.family)
        n = nc if nc is not None else (len(names) if names is not None else 80)
        with torch.random.fork_rng(devices=[]):  # the caller's random stream is left as it was
            torch.manual_seed(INIT_SEED)  # the same untrained network in every process
            return cls(size=parsed.size, task=parsed.task, nc=n, names=names)
    path = hub_repo_weights(name) or hub_snapshot_weights(Path(name)) or find_weights(name)
    if detect_format(path) is not None:  # another library's checkpoint: convert on load
        fam = load_foreign(path)
    else:
        fam = model_from_checkpoint(read_checkpoint(path), str(path))
    if nc is not None and nc != fam.nc:
        raise CheckpointError(
            f"{name!r} was trained with nc={fam.nc}; to train on {nc} classes load it as is and pass "
            "your dataset to train() (the head is rebuilt), or use pretrained=False"
        )
    return fam
