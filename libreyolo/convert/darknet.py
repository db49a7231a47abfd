"""Reader for Darknet ``.weights`` files (pjreddie/darknet, AlexeyAB/darknet: ``yolov3.weights``,
``yolov4.weights``): a 20- (or 16-) byte header and a flat float32 array, read with numpy (no code
runs). The file names no tensors; the families of the Darknet lineage map the array onto their
layers in ``.cfg`` order (``libreyolo/models/_darknet/convert.py``). The released COCO weights
are public domain (pjreddie, YOLO licence) / their repositories' terms (AlexeyAB).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from ..errors import CheckpointError
from . import ForeignWeights

SOURCE = "darknet"


def recognise(path: Path) -> bool:
    """A ``.weights`` file whose header is a plausible Darknet version and whose float data is a
    whole number of float32 values."""
    if path.suffix != ".weights":
        return False
    try:
        with path.open("rb") as f:
            head = f.read(20)
        size = path.stat().st_size
    except OSError:
        return False
    if len(head) < 20:
        return False
    major, minor, _ = (int(v) for v in np.frombuffer(head, np.int32, 3))
    if not (0 <= major < 1000 and 0 <= minor < 1000):
        return False
    off = 20 if major * 10 + minor >= 2 else 16
    return size > off and (size - off) % 4 == 0


def read(path: Path) -> ForeignWeights:
    """:class:`ForeignWeights` with one tensor, ``"darknet.weights"`` (the flat values)."""
    from ..models._darknet.convert import FLAT_KEY, read_weights

    try:
        header, flat = read_weights(path)
    except OSError as e:
        raise CheckpointError(f"'{path}' cannot be read: {e}") from e
    return ForeignWeights(source=SOURCE, arch="", state_dict={FLAT_KEY: torch.from_numpy(flat.copy())},
                          path=str(path), licence="see the Darknet release the file came from",
                          extra={"header": header})
