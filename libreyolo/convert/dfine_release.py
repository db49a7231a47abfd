"""Reader for the original release checkpoints of D-FINE (Peterande/D-FINE, ``dfine_{n,s}_coco.pth``)
and DEIM-D-FINE (ShihuaHuang95/DEIM, ``deim_dfine_hgnetv2_{n,s}_coco.pth``).

Both trainers ``torch.save`` a plain dict (``src/solver/_solver.py`` / ``engine/solver/_solver.py``
``state_dict()``): ``"model"`` (the network's state dict), ``"ema"`` (``{"module": state_dict,
"updates": int}``, ``src/optim/ema.py``) and the optimiser / scheduler states; DEIM's
``tools/reference/convert_weight.py`` keeps only ``{"model": <the EMA weights>}``. Read with
``torch.load(weights_only=True)`` (no code runs). The EMA weights are taken when the file has them
(the references' own inference does the same), else ``"model"``; ``extra["weights"]`` says which.

The two releases hold the same tensor names (the D-FINE network), so ``arch`` comes from the file
name: ``"deim_dfine"`` when it contains ``deim``, else ``"dfine"`` (which family takes which:
:mod:`libreyolo.models._detr.dfine_release_convert`). Both releases are Apache-2.0.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import torch

from . import ForeignWeights, torchsave

logger = logging.getLogger(__name__)

SOURCE = "dfine_release"
_MARKERS = ("backbone.stem.stem1.conv.weight", "encoder.fpn_blocks.0.cv4.conv.weight",
            "decoder.decoder.lqe_layers.0.reg_conf.layers.0.weight")


def _weights(obj: Any) -> tuple[str, dict[str, torch.Tensor]] | None:
    """``(which, state_dict)``: ``("ema", obj["ema"]["module"])`` first, then ``("model", ...)``,
    then the object itself as a bare state dict; ``None`` when none is a D-FINE state dict."""
    if not isinstance(obj, dict):
        return None
    ema = obj.get("ema")
    if isinstance(ema, dict) and (sd := torchsave.marked_state_dict(ema, _MARKERS, under="module")) is not None:
        return "ema", sd
    if (sd := torchsave.marked_state_dict(obj, _MARKERS, under="model")) is not None:
        return ("model" if "model" in obj else "state_dict"), sd
    return None


def recognise(path: Path) -> bool:
    """A ``torch.save`` archive holding an original D-FINE / DEIM state dict (module docstring)."""
    return torchsave.recognise(path, (_MARKERS,), _weights)


def read(path: Path) -> ForeignWeights:
    """:class:`ForeignWeights` of an original D-FINE / DEIM release file (module docstring)."""
    found = torchsave.read(path, _weights,
                           holds_no='original D-FINE / DEIM state dict (under "ema"/"module" or "model")')
    which, sd = found
    arch = "deim_dfine" if "deim" in Path(path).name.lower() else "dfine"
    logger.info("'%s': %s weights of an original %s checkpoint", path, which, arch)
    return ForeignWeights(source=SOURCE, arch=arch, state_dict=dict(sd), path=str(path),
                          licence="Apache-2.0 (official D-FINE / DEIM weights)", extra={"weights": which})
