"""YOLOv9 against the original GELAN code (WongKinYiu/yolov9, ``models/detect/gelan-*.yaml``), when a
checkout of it is named by ``LIBREYOLO_YOLOV9_REPO`` (it is not a package, so CI skips this file).
The reference is built from its yaml with a fixed seed and random BatchNorm statistics, converted
with ``yolo9/convert.py``, and both run in eval mode on the same input.

Result (run here against commit 5b1ea9a): s, m and c are exact. t is not convertible from a
reference *built by that code*: its ``DDetect`` makes the class branch ``max(ch0, min(2 * nc, 128))``
= 128 wide at 80 classes, ours 80 (the rule the network docstring gives for the released YOLOv9-T
model); the test states this as a strict xfail."""

from __future__ import annotations

import os
import sys
import types
from pathlib import Path

import pytest
import torch
from _convert_helpers import assert_rel_close, randomize_norms

from libreyolo.errors import CheckpointError
from libreyolo.models.yolo9.convert import convert_state_dict
from libreyolo.models.yolo9.nn import build_yolo9

REPO = os.environ.get("LIBREYOLO_YOLOV9_REPO", "")
pytestmark = pytest.mark.skipif(not (REPO and (Path(REPO) / "models" / "yolo.py").is_file()),
                                reason="LIBREYOLO_YOLOV9_REPO does not name a WongKinYiu/yolov9 checkout")


@pytest.fixture(scope="module")
def detection_model():
    """The reference's ``DetectionModel``, importable without its notebook/plotting extras."""
    saved = dict(sys.modules)
    ipy, disp, pkg = (types.ModuleType(n) for n in ("IPython", "IPython.display", "pkg_resources"))
    disp.display, ipy.get_ipython = print, (lambda: None)
    from packaging.version import parse

    pkg.parse_version = parse
    for name, mod in (("IPython", ipy), ("IPython.display", disp), ("pkg_resources", pkg),
                      ("seaborn", types.ModuleType("seaborn"))):
        sys.modules.setdefault(name, mod)
    sys.path.insert(0, REPO)
    try:
        from models.yolo import DetectionModel

        yield DetectionModel
    finally:
        sys.path.remove(REPO)
        for name in [n for n in sys.modules if n not in saved]:
            if name.split(".")[0] in ("models", "utils", "IPython", "pkg_resources", "seaborn"):
                del sys.modules[name]


def _check(detection_model, size: str) -> None:
    torch.manual_seed(0)
    ref = detection_model(str(Path(REPO) / "models" / "detect" / f"gelan-{size}.yaml"), ch=3, nc=80).eval()
    randomize_norms(ref)
    ours = build_yolo9(size=size, nc=80).eval()
    ours.load_state_dict(convert_state_dict(ref.state_dict(), ours.state_dict()))
    x = torch.rand(1, 3, 64, 96, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        raw = ref(x)[1]  # eval: (decoded, raw per-level outputs)
        out = ours(x)
    for i in range(3):
        assert_rel_close(out[i], raw[i], what=f"gelan-{size} level {i}")


@pytest.mark.parametrize("size", ["s", "m", "c"])
def test_raw_outputs_equal_original_gelan(detection_model, size: str) -> None:
    _check(detection_model, size)


@pytest.mark.xfail(strict=True, raises=CheckpointError,
                   reason="the reference code builds gelan-t's class branch 128 wide (min(2 * nc, 128)), ours 80")
def test_raw_outputs_equal_original_gelan_t(detection_model) -> None:
    _check(detection_model, "t")
