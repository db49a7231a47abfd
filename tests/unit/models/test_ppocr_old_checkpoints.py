"""PP-OCR files saved before the angle classifier existed (no ``cls.*`` weights, no ``cls_loaded``
flag) still load: the classifier keeps its fresh weights, angle classification is off, every
other tensor is the file's. A file missing any other tensor is still refused."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch

from libreyolo import LibreYOLO
from libreyolo.errors import CheckpointError
from libreyolo.model import Model
from libreyolo.models.ppocr.family import PPOCR


def _old_file(tmp_path: Path, drop: object) -> tuple[Path, dict[str, torch.Tensor]]:
    """A tiny PP-OCR saved, then its state dict stripped of the keys ``drop(key)`` selects."""
    torch.manual_seed(0)
    fam = PPOCR(size="tiny")
    fam.net.cls_loaded.fill_(True)  # the stripped flag must not come back from this model
    path = Model(fam).save(tmp_path / "LibrePPOCRtiny-ocr.pt")
    obj = torch.load(path, map_location="cpu", weights_only=False)
    obj["model"] = {k: v for k, v in obj["model"].items() if not drop(k)}
    torch.save(obj, path)
    return path, obj["model"]


def test_a_file_without_the_angle_classifier_loads(tmp_path: Path) -> None:
    path, saved = _old_file(tmp_path, lambda k: k.startswith("cls.") or k == "cls_loaded")
    assert saved and not any(k.startswith("cls") for k in saved)
    loaded = LibreYOLO(str(path))
    net = loaded.family.net
    assert not bool(net.cls_loaded) and not loaded.family.angle_cls_enabled
    own = net.state_dict()
    assert set(own) - set(saved) == {k for k in own if k.startswith("cls.") or k == "cls_loaded"}
    assert all(torch.equal(own[k], v) for k, v in saved.items())  # det.* and rec.*: the file's


def test_a_file_missing_another_tensor_is_still_refused(tmp_path: Path) -> None:
    victim = next(k for k in PPOCR(size="tiny").net.state_dict() if k.startswith("rec."))
    path, _ = _old_file(tmp_path, lambda k: k.startswith("cls.") or k == "cls_loaded" or k == victim)
    with pytest.raises(CheckpointError, match=rf"1 missing, e\.g\. {re.escape(victim)}"):
        LibreYOLO(str(path))
