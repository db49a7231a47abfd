"""The YOLOX checkpoint reader without the reference package (which CI cannot install): a file laid
out as the official trainer writes it (``{"start_epoch", "model", "optimizer"}``, reference tensor
names) is recognised, read with ``weights_only=True`` and loads; the fidelity against the official
code is ``test_yolox_official.py``."""

from __future__ import annotations

from pathlib import Path

import torch

from libreyolo import LibreYOLO
from libreyolo.convert import detect_format
from libreyolo.models.yolox.nn import build_yolox


def test_official_layout_loads_by_path(tmp_path: Path) -> None:
    torch.manual_seed(0)
    sd = {k: v for k, v in build_yolox(size="tiny", nc=7).state_dict().items() if "num_batches" not in k}
    path = tmp_path / "yolox_tiny.pth"
    torch.save({"start_epoch": 300, "model": sd, "optimizer": {"state": {}}, "amp": None}, path)
    assert detect_format(path) == "yolox"
    model = LibreYOLO(str(path))
    assert (model.FAMILY, model.size, model.nc) == ("yolox", "tiny", 7)
    own = model.net.state_dict()
    assert all(torch.equal(own[k], v) for k, v in sd.items())
    native = tmp_path / "native.pt"
    model.save(native)
    assert detect_format(native) is None  # our own checkpoints are never taken for foreign ones
