"""Reader for Ultralytics ``.pt`` checkpoints (and the original YOLOv9 repo's, same layout).

Those files pickle the whole model object (``ultralytics.nn.tasks.DetectionModel``); they are
read with the restricted unpickler (:mod:`.unpickle`), which never imports or runs anything the
file names. The weights taken are the EMA model's when present (what Ultralytics predicts with),
else the model's, as a ``model.<i>.<...>`` state dict. Weights trained with Ultralytics are
usually published under AGPL-3.0.
"""

from __future__ import annotations

import re
import zipfile
from pathlib import Path
from typing import Any

from ..errors import CheckpointError
from . import ForeignWeights
from .unpickle import Stub, module_state_dict, pickle_globals, read_foreign_pickle

SOURCE = "ultralytics"
# first module of the pickled model classes: Ultralytics, and the original YOLOv9/YOLOv7 repos
_MODEL_MODULES = ("ultralytics.", "models.yolo.", "models.common.")


def recognise(path: Path) -> bool:
    """A ``torch.save`` zip whose pickle names an Ultralytics (or YOLOv9-repo) model class."""
    if not zipfile.is_zipfile(path):
        return False
    return any(g.startswith(_MODEL_MODULES) for g in pickle_globals(path))


def _arch(model: Stub) -> str:
    y = model.__dict__.get("yaml")
    yaml_file = y.get("yaml_file", "") if isinstance(y, dict) else ""
    m = re.search(r"([A-Za-z0-9\-]+?)(?:\.ya?ml)?$", str(yaml_file))
    return m.group(1) if m else ""


def read(path: Path) -> ForeignWeights:
    """:class:`ForeignWeights` of an Ultralytics checkpoint (module docstring).

    Raises:
        CheckpointError: truncated/corrupt file, or no model object inside.
    """
    obj: Any = read_foreign_pickle(path)
    model = None
    if isinstance(obj, dict):
        model = obj.get("ema") if isinstance(obj.get("ema"), Stub) else obj.get("model")
    elif isinstance(obj, Stub):
        model = obj
    if not isinstance(model, Stub) or "_modules" not in model.__dict__:
        raise CheckpointError(f"'{path}' looks like an Ultralytics checkpoint but holds no model object "
                              "(no 'model' or 'ema' entry); use a weights file saved by Ultralytics.")
    sd = dict(module_state_dict(model))
    if not sd:
        raise CheckpointError(f"'{path}' holds an Ultralytics model object without any tensors.")
    names = model.__dict__.get("names")
    if isinstance(names, list | tuple):
        names = dict(enumerate(names))
    if not isinstance(names, dict):
        names = None
    else:
        names = {int(k): str(v) for k, v in names.items()}
    kind = getattr(model, "_stub_name", "")
    return ForeignWeights(source=SOURCE, arch=_arch(model), state_dict=sd, path=str(path), names=names,
                          licence="AGPL-3.0 (Ultralytics-trained weights)",
                          extra={"class": kind, "task": model.__dict__.get("task")})
