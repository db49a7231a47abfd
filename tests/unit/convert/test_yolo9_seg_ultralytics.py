"""yolo9_seg against Ultralytics' YOLOv9-seg, built from its own modules with a fixed seed:
``yolov9c-seg.yaml`` for c, ``yolov9t.yaml`` with its ``Detect`` replaced by ``Segment(nc, 32, 64)``
for t (Ultralytics ships no t/s seg config). Random BatchNorm statistics, weights converted, fp32
eval outputs (raw levels, mask coefficients, prototypes) compared within 1e-5 relative; the saved
Ultralytics file loads through ``LibreYOLO`` as a ``yolo9_seg`` model."""

from __future__ import annotations

import copy
import os
import tempfile
from pathlib import Path

import pytest
import torch
from _convert_helpers import assert_rel_close, randomize_norms

os.environ.setdefault("YOLO_OFFLINE", "true")
os.environ.setdefault("YOLO_CONFIG_DIR", tempfile.mkdtemp(prefix="ulcfg-"))
ultralytics = pytest.importorskip("ultralytics")

from libreyolo import LibreYOLO  # noqa: E402
from libreyolo.models.yolo9_seg import convert as seg_convert  # noqa: E402
from libreyolo.models.yolo9_seg.nn import NM, VARIANTS, build_yolo9_seg  # noqa: E402

REG_MAX = 16


def seg_yaml(size: str) -> dict:
    from ultralytics.utils import YAML

    base = Path(ultralytics.__file__).parent / "cfg" / "models" / "v9"
    if size == "c":
        return YAML.load(base / "yolov9c-seg.yaml")
    d = YAML.load(base / f"yolov9{size}.yaml")
    assert d["head"][-1][2] == "Detect"
    d["head"][-1] = [d["head"][-1][0], 1, "Segment", ["nc", NM, VARIANTS[size].npr]]
    return d


def _reference(size: str):
    from ultralytics.nn.tasks import SegmentationModel

    torch.manual_seed(0)
    net = SegmentationModel(seg_yaml(size), nc=80, verbose=False).eval()
    randomize_norms(net)
    return net


@pytest.mark.parametrize("size", ["t", "c"])
def test_raw_outputs_equal_reference(size: str) -> None:
    ref = _reference(size)
    sd = ref.state_dict()
    assert seg_convert.infer_size_nc(sd) == (size, 80)
    ours = build_yolo9_seg(size=size, nc=80, box_groups=1).eval()
    ours.load_state_dict(seg_convert.convert_state_dict(sd, ours.state_dict()))
    x = torch.rand(1, 3, 64, 96, generator=torch.Generator().manual_seed(4))
    with torch.no_grad():
        _, (levels, coef, proto) = ref(x)
        got = ours(x)
    split = 4 * REG_MAX + 80
    for i in range(3):
        assert_rel_close(got[i][:, :split], levels[i], what=f"seg {size} level {i}")
    assert_rel_close(torch.cat([g[:, split:].flatten(2) for g in got[:3]], 2), coef, what=f"seg {size} coefficients")
    assert_rel_close(got[3], proto, what=f"seg {size} prototypes")


def test_libreyolo_loads_the_saved_ultralytics_file(tmp_path: Path) -> None:
    from ultralytics import YOLO

    yolo = YOLO("yolov9t.yaml", verbose=False)
    yolo.model = _reference("t")
    path = tmp_path / "v9t_seg.pt"
    yolo.save(str(path))
    model = LibreYOLO(str(path))
    assert model.FAMILY == "yolo9_seg" and model.task == "segment" and model.size == "t" and model.nc == 80
    assert model.arch == {"box_groups": 1}
    x = torch.rand(1, 3, 64, 64, generator=torch.Generator().manual_seed(6))
    ref = copy.deepcopy(yolo.model).half().float().eval()  # the file holds the weights in fp16
    with torch.no_grad():
        _, (_, _, proto) = ref(x)
        got = model.net.eval()(x)
    assert_rel_close(got[3], proto, rtol=1e-4, what="loaded prototypes")
