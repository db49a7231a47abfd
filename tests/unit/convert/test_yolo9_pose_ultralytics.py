"""yolo9_pose against Ultralytics' ``Pose`` head on the YOLOv9 network, built from its own modules
with a fixed seed: ``yolov9{t,s}.yaml`` with its ``Detect`` replaced by ``Pose(nc, kpt_shape)`` (the
head of ``yolov8n-pose.yaml``; Ultralytics ships no YOLOv9 pose config). Random BatchNorm
statistics, weights converted, fp32 eval outputs (raw levels, raw keypoints and the decoded
keypoints) compared within 1e-5 relative; parameter counts equal; the saved Ultralytics file loads
through ``LibreYOLO`` as a ``yolo9_pose`` model."""

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
from libreyolo.models.yolo9_pose import convert as pose_convert  # noqa: E402
from libreyolo.models.yolo9_pose.nn import build_yolo9_pose, decode_keypoints  # noqa: E402
from libreyolo.ops.anchors import make_anchors  # noqa: E402

REG_MAX = 16


def pose_yaml(size: str, nkpt: int) -> dict:
    from ultralytics.utils import YAML

    d = YAML.load(Path(ultralytics.__file__).parent / "cfg" / "models" / "v9" / f"yolov9{size}.yaml")
    assert d["head"][-1][2] == "Detect"
    d["head"][-1] = [d["head"][-1][0], 1, "Pose", ["nc", [nkpt, 3]]]
    d["kpt_shape"] = [nkpt, 3]
    return d


def _reference(size: str, nkpt: int, nc: int = 80):
    from ultralytics.nn.tasks import PoseModel

    torch.manual_seed(0)
    net = PoseModel(pose_yaml(size, nkpt), nc=nc, data_kpt_shape=(nkpt, 3), verbose=False).eval()
    randomize_norms(net)
    return net


@pytest.mark.parametrize(("size", "nkpt"), [("t", 17), ("s", 5)])
def test_raw_and_decoded_outputs_equal_reference(size: str, nkpt: int) -> None:
    ref = _reference(size, nkpt)
    sd = ref.state_dict()
    assert pose_convert.infer_size_nc(sd) == (size, 80) and pose_convert.nkpt_of(sd) == nkpt
    ours = build_yolo9_pose(size=size, nc=80, nkpt=nkpt, box_groups=1).eval()
    # equal parameter counts, less Ultralytics' constant DFL projection (16 values; ours decodes it in postprocess)
    ref_params = sum(p.numel() for n, p in ref.named_parameters() if ".dfl." not in n)
    assert sum(p.numel() for p in ours.parameters()) == ref_params
    ours.load_state_dict(pose_convert.convert_state_dict(sd, ours.state_dict()))
    x = torch.rand(1, 3, 64, 96, generator=torch.Generator().manual_seed(4))
    with torch.no_grad():
        decoded, (levels, kpt) = ref(x)
        got = ours(x)
    split = 4 * REG_MAX + 80
    for i in range(3):
        assert_rel_close(got[i][:, :split], levels[i], what=f"pose {size} level {i}")
    raw = torch.cat([g[:, split:].flatten(2) for g in got], 2)  # (1, 3K, A)
    assert_rel_close(raw, kpt, what=f"pose {size} raw keypoints")
    anchors, strides = make_anchors([tuple(g.shape[2:]) for g in got], (8, 16, 32), device=x.device)
    ours_dec = decode_keypoints(raw[0].T.reshape(-1, nkpt, 3), anchors, strides)  # (A, K, 3)
    ref_dec = decoded[0, 4 + 80:].T.reshape(-1, nkpt, 3)
    assert_rel_close(ours_dec, ref_dec, what=f"pose {size} decoded keypoints")


def test_libreyolo_loads_the_saved_ultralytics_file(tmp_path: Path) -> None:
    from ultralytics import YOLO

    yolo = YOLO("yolov9t.yaml", verbose=False)
    yolo.model = _reference("t", 4, nc=3)
    path = tmp_path / "v9t_pose.pt"
    yolo.save(str(path))
    model = LibreYOLO(str(path))
    assert model.FAMILY == "yolo9_pose" and model.task == "pose" and model.size == "t" and model.nc == 3
    assert model.arch == {"box_groups": 1, "nkpt": 4}
    x = torch.rand(1, 3, 64, 64, generator=torch.Generator().manual_seed(6))
    ref = copy.deepcopy(yolo.model).half().float().eval()  # the file holds the weights in fp16
    with torch.no_grad():
        _, (_, kpt) = ref(x)
        got = model.net.eval()(x)
    raw = torch.cat([g[:, 4 * REG_MAX + 3:].flatten(2) for g in got], 2)
    assert_rel_close(raw, kpt, rtol=1e-4, what="loaded raw keypoints")
