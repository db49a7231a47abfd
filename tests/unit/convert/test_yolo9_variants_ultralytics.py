"""yolo9_p2 and yolo9_e2e against Ultralytics, built from its own modules with a fixed seed.

Ultralytics 8.3 ships no YOLOv9 P2 or end-to-end config, so the reference network is its
``yolov9{t,s}.yaml`` changed in the one way each variant names: for P2 the stride-4 step inserted
after layer 15 exactly as ``yolov8-p2.yaml`` extends ``yolov8.yaml`` (widths of the variant's
size table), ``Detect`` on four levels; for end-to-end the ``Detect`` layer replaced by
``v10Detect`` (YOLOv10's dual head). Random BatchNorm statistics, weights converted, fp32 eval
outputs compared within 1e-5 relative; the saved Ultralytics file loads through ``LibreYOLO``.
"""

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
from libreyolo.models.yolo9_e2e import convert as e2e_convert  # noqa: E402
from libreyolo.models.yolo9_e2e.nn import build_yolo9_e2e  # noqa: E402
from libreyolo.models.yolo9_e2e.postprocess import decode  # noqa: E402
from libreyolo.models.yolo9_p2 import convert as p2_convert  # noqa: E402
from libreyolo.models.yolo9_p2.nn import build_yolo9_p2  # noqa: E402
from libreyolo.models.yolo9_p2.variants import P2_NECKS  # noqa: E402


def _v9_yaml(size: str) -> dict:
    from ultralytics.utils import YAML

    return YAML.load(Path(ultralytics.__file__).parent / "cfg" / "models" / "v9" / f"yolov9{size}.yaml")


def p2_yaml(size: str) -> dict:
    """``yolov9{size}.yaml`` with the stride-4 level, in ``yolov8-p2.yaml``'s pattern."""
    d = _v9_yaml(size)
    neck = P2_NECKS[size]
    top, rest = d["head"][:6], copy.deepcopy(d["head"][6:12])  # layers 10..15 | 16..21 -> 22..27
    rest[1][0], rest[4][0] = [-1, 12], [-1, 9]  # their concatenations keep pointing at P4 and P5
    d["head"] = [*top,
                 [-1, 1, "nn.Upsample", [None, 2, "nearest"]],
                 [[-1, 2], 1, "Concat", [1]],  # cat backbone P2
                 [-1, 1, "RepNCSPELAN4", list(neck.top2)],  # 18 (P2/4)
                 [-1, 1, "AConv", [neck.down3]],
                 [[-1, 15], 1, "Concat", [1]],  # cat head P3
                 [-1, 1, "RepNCSPELAN4", list(neck.bottom3)],  # 21 (P3/8)
                 *rest,
                 [[18, 21, 24, 27], 1, "Detect", ["nc"]]]
    return d


def e2e_yaml(size: str) -> dict:
    d = _v9_yaml(size)
    assert d["head"][-1][2] == "Detect"
    d["head"][-1][2] = "v10Detect"
    return d


def _reference(cfg: dict):
    from ultralytics.nn.tasks import DetectionModel

    torch.manual_seed(0)
    net = DetectionModel(cfg, verbose=False).eval()
    randomize_norms(net)
    return net


def _n(m: torch.nn.Module) -> int:
    return sum(p.numel() for p in m.parameters())


@pytest.mark.parametrize("size", ["t", "s"])
def test_p2_raw_outputs_equal_reference(size: str) -> None:
    ref = _reference(p2_yaml(size))
    assert ref.stride.tolist() == [4.0, 8.0, 16.0, 32.0]
    sd = ref.state_dict()
    assert p2_convert.infer_size_nc(sd) == (size, 80)
    ours = build_yolo9_p2(size=size, nc=80, box_groups=1).eval()
    assert _n(ours) + 16 == _n(ref)  # the reference's only extra tensor: the constant DFL projection
    ours.load_state_dict(p2_convert.convert_state_dict(sd, ours.state_dict()))
    x = torch.rand(1, 3, 64, 96, generator=torch.Generator().manual_seed(4))
    with torch.no_grad():
        want = ref(x)[1]
        got = ours(x)
    assert len(got) == len(want) == 4
    for i in range(4):
        assert_rel_close(got[i], want[i], what=f"p2 {size} level {i}")


@pytest.mark.parametrize("size", ["t", "s"])
def test_e2e_heads_and_selection_equal_reference(size: str) -> None:
    ref = _reference(e2e_yaml(size))
    sd = ref.state_dict()
    assert e2e_convert.infer_size_nc(sd) == (size, 80)
    ours = build_yolo9_e2e(size=size, nc=80).eval()
    assert _n(ours) + 16 == _n(ref)
    ours.load_state_dict(e2e_convert.convert_state_dict(sd, ours.state_dict()))
    x = torch.rand(2, 3, 64, 96, generator=torch.Generator().manual_seed(5))
    with torch.no_grad():
        dets_ref, raw_ref = ref(x)
        got = ours(x)
    for i in range(3):
        assert_rel_close(got[i], raw_ref["one2one"][i], what=f"e2e {size} one-to-one level {i}")
    # the reference's own selection (top-k anchors, then top-k (anchor, class) pairs, no NMS)
    dets = decode(got, net=ours, k=300)
    assert dets.shape == dets_ref.shape
    assert torch.equal(dets[..., 5], dets_ref[..., 5])
    assert_rel_close(dets[..., :5], dets_ref[..., :5], what=f"e2e {size} detections")
    # train mode: the one-to-many head is the reference's cv2 / cv3
    ref.train()
    ours.train()
    with torch.no_grad():
        tr_ref = ref(x)
        tr = ours(x)
    for i in range(3):
        assert_rel_close(tr[3 + i], tr_ref["one2many"][i], what=f"e2e {size} one-to-many level {i}")
        assert_rel_close(tr[i], tr_ref["one2one"][i], what=f"e2e {size} one-to-one (train) level {i}")


@pytest.mark.parametrize("kind", ["p2", "e2e"])
def test_libreyolo_loads_the_saved_ultralytics_file(kind: str, tmp_path: Path) -> None:
    from ultralytics import YOLO

    yolo = YOLO("yolov9t.yaml", verbose=False)
    yolo.model = _reference(p2_yaml("t") if kind == "p2" else e2e_yaml("t"))
    path = tmp_path / f"v9t_{kind}.pt"
    yolo.save(str(path))
    model = LibreYOLO(str(path))
    assert model.FAMILY == f"yolo9_{kind}" and model.size == "t" and model.nc == 80
    if kind == "p2":
        assert model.arch == {"box_groups": 1}
    x = torch.rand(1, 3, 64, 64, generator=torch.Generator().manual_seed(6))
    ref = copy.deepcopy(yolo.model).half().float().eval()  # the file holds the weights in fp16
    with torch.no_grad():
        want = ref(x)[1]
        got = model.net.float().eval()(x)
    want = want if kind == "p2" else want["one2one"]
    for a, b in zip(got, want, strict=True):
        assert_rel_close(a, b, what=f"{kind} loaded")
