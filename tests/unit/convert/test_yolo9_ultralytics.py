"""YOLOv9 against Ultralytics (issue 18): the reference is built from its yaml with a fixed seed,
random BatchNorm statistics, converted, and both run in eval mode on the same input.

Backbone and neck are the same network (features equal), and so is the class branch of the head;
Ultralytics' ``Detect`` box branch is ungrouped where ours (and the original YOLOv9 ``DDetect``)
uses ``groups=4``, so an Ultralytics checkpoint converts onto the ``box_groups=1`` head variant
(``YOLO9.set_arch``), which the native checkpoint remembers.
"""

from __future__ import annotations

import os
import tempfile

import pytest
import torch
from _convert_helpers import assert_rel_close, randomize_norms

# Ultralytics reads these when imported: no network, settings in a scratch folder
os.environ.setdefault("YOLO_OFFLINE", "true")
os.environ.setdefault("YOLO_CONFIG_DIR", tempfile.mkdtemp(prefix="ulcfg-"))
ultralytics = pytest.importorskip("ultralytics")

from libreyolo import LibreYOLO  # noqa: E402
from libreyolo.convert import detect_format, read_foreign  # noqa: E402
from libreyolo.convert.unpickle import module_state_dict, read_foreign_pickle  # noqa: E402
from libreyolo.errors import CheckpointError  # noqa: E402
from libreyolo.models.yolo9.convert import (  # noqa: E402
    box_groups_of,
    convert_state_dict,
    infer_size_nc,
    rename_state_dict,
)
from libreyolo.models.yolo9.nn import build_yolo9  # noqa: E402


def _reference(size: str):
    from ultralytics import YOLO

    torch.manual_seed(0)
    yolo = YOLO(f"yolov9{size}.yaml", verbose=False)
    net = yolo.model.eval()
    randomize_norms(net)
    return yolo, net


def _ref_features(net, x):
    """Inputs of the Detect head (P3, P4, P5 features) and its class logits per level."""
    detect = net.model[-1]
    got = {}

    def hook(_m, inputs):
        got["feats"] = [t.clone() for t in inputs[0]]

    h = detect.register_forward_pre_hook(hook)
    with torch.no_grad():
        net(x)
    h.remove()
    with torch.no_grad():
        cls = [detect.cv3[i](f) for i, f in enumerate(got["feats"])]
    return got["feats"], cls


@pytest.mark.parametrize("size", ["t", "s", "m", "c"])
def test_backbone_neck_and_class_branch_equal_reference(size: str) -> None:
    _, ref = _reference(size)
    sd = ref.state_dict()
    assert infer_size_nc(sd) == (size, 80)
    ours = build_yolo9(size=size, nc=80).eval()
    renamed = rename_state_dict(sd)
    own = ours.state_dict()
    not_box = {k: v for k, v in renamed.items() if not k.startswith("head.box.")}
    for k, v in not_box.items():
        assert tuple(own[k].shape) == tuple(v.shape), k
    missing = [k for k in own if k not in not_box and not k.startswith("head.box.")
               and not k.endswith("num_batches_tracked")]
    assert missing == []
    ours.load_state_dict(not_box, strict=False)
    x = torch.rand(1, 3, 64, 96, generator=torch.Generator().manual_seed(3))
    feats_ref, cls_ref = _ref_features(ref, x)
    got = {}
    hooks = [getattr(ours, n).register_forward_hook(lambda _m, _i, o, n=n: got.__setitem__(n, o))
             for n in ("top3", "bottom4", "bottom5")]
    with torch.no_grad():
        out = ours(x)
    for h in hooks:
        h.remove()
    for i, n in enumerate(("top3", "bottom4", "bottom5")):
        assert_rel_close(got[n], feats_ref[i], what=f"{size} {n}")
        assert_rel_close(out[i][:, 64:], cls_ref[i], what=f"{size} class logits level {i}")


def test_conversion_names_the_first_key_that_does_not_fit() -> None:
    _, ref = _reference("t")
    own = build_yolo9(size="t", nc=80).state_dict()
    with pytest.raises(CheckpointError, match=r"model\.22\.cv2\.0\.1\.conv\.weight.*ungrouped"):
        convert_state_dict(ref.state_dict(), own)


@pytest.mark.parametrize("size", ["t", "s", "m", "c"])
def test_raw_head_outputs_equal_reference(size: str) -> None:
    _, ref = _reference(size)
    assert box_groups_of(ref.state_dict()) == 1
    ours = build_yolo9(size=size, nc=80, box_groups=1).eval()
    ours.load_state_dict(convert_state_dict(ref.state_dict(), ours.state_dict()))
    x = torch.rand(1, 3, 64, 64, generator=torch.Generator().manual_seed(4))
    with torch.no_grad():
        ref_raw = ref(x)[1]
        out = ours(x)
    for i in range(3):
        assert_rel_close(out[i], ref_raw[i], what=f"{size} level {i}")


@pytest.fixture(scope="module")
def saved_v9t(tmp_path_factory: pytest.TempPathFactory):
    yolo, ref = _reference("t")
    path = tmp_path_factory.mktemp("ul") / "yolov9t.pt"
    yolo.save(str(path))  # Ultralytics' own format: a pickled DetectionModel in fp16
    return path, ref


def test_saved_pt_reads_through_restricted_unpickler(saved_v9t) -> None:
    path, ref = saved_v9t
    assert detect_format(path) == "ultralytics"
    obj = read_foreign_pickle(path)
    sd = module_state_dict(obj["model"])
    ref_sd = ref.state_dict()
    assert list(sd) == list(ref_sd)
    for k, v in ref_sd.items():
        assert torch.equal(sd[k], v.half() if v.is_floating_point() else v), k
    fw = read_foreign(path)
    assert fw.arch == "yolov9t" and fw.names is not None and len(fw.names) == 80


def test_libreyolo_loads_ultralytics_pt_and_keeps_the_head_layout(saved_v9t, tmp_path) -> None:
    path, ref = saved_v9t
    model = LibreYOLO(str(path))
    assert model.FAMILY == "yolo9" and model.size == "t" and model.arch == {"box_groups": 1}
    x = torch.rand(1, 3, 64, 64, generator=torch.Generator().manual_seed(5))
    with torch.no_grad():
        want = [t.float() for t in model.net.float()(x)]
    native = model.save(tmp_path / "converted.pt")
    again = LibreYOLO(str(native))  # a native checkpoint: the arch option comes from its metadata
    assert again.arch == {"box_groups": 1}
    with torch.no_grad():
        got = again.net.float()(x)
    for a, b in zip(got, want, strict=True):
        assert torch.equal(a, b)
    assert LibreYOLO("LibreYOLO9t.pt").arch == {}  # the default head stays grouped


def test_ultralytics_model_of_no_family_is_one_line_error(tmp_path) -> None:
    from ultralytics import YOLO

    path = tmp_path / "yolov8n.pt"
    YOLO("yolov8n.yaml", verbose=False).save(str(path))
    with pytest.raises(CheckpointError) as e:
        LibreYOLO(str(path))
    msg = str(e.value)
    assert "\n" not in msg and "yolov8n" in msg and "matches no libreyolo family" in msg


def _ultralytics_from_ours(ours_net, nc: int):
    """An Ultralytics YOLOv9-t holding our trained weights: every reference key filled from the
    tensor :func:`rename_key` names, grouped box kernels written as the block-diagonal dense
    kernels they are (a grouped conv is an ungrouped one with zeros between the groups)."""
    from ultralytics import YOLO

    from libreyolo.models.yolo9.convert import rename_key

    yolo = YOLO("yolov9t.yaml", verbose=False) if nc == 80 else _ul_with_nc(nc)
    net = yolo.model
    own = ours_net.state_dict()
    sd = {}
    for k, v in net.state_dict().items():
        name = rename_key(k)
        if name is None:
            sd[k] = v
            continue
        src = own[name]
        if src.shape != v.shape:  # grouped (ours) -> dense block-diagonal (Ultralytics)
            g = v.shape[1] // src.shape[1]
            dense = torch.zeros_like(v)
            o, i = v.shape[0] // g, src.shape[1]
            for j in range(g):
                dense[j * o:(j + 1) * o, j * i:(j + 1) * i] = src[j * o:(j + 1) * o]
            src = dense
        sd[k] = src.to(v.dtype)
    net.load_state_dict(sd)
    return yolo


def _ul_with_nc(nc: int):
    from ultralytics import YOLO
    from ultralytics.nn.tasks import DetectionModel

    yolo = YOLO("yolov9t.yaml", verbose=False)
    yolo.model = DetectionModel("yolov9t.yaml", nc=nc, verbose=False)
    return yolo


def test_predict_boxes_match_ultralytics(tmp_path) -> None:
    """The bundled trained yolo9-t written into an Ultralytics YOLOv9-t file, then loaded back by
    libreyolo: on the sample scene both libraries find the same objects (same class, boxes within
    1 px, scores within 1e-3)."""
    from libreyolo import SAMPLE_IMAGE

    trained = LibreYOLO("LibreYOLO9t.pt")
    yolo = _ultralytics_from_ours(trained.net.float().eval(), trained.nc)
    yolo.model.names = dict(trained.names)
    path = tmp_path / "v9t_trained.pt"
    yolo.save(str(path))
    from ultralytics import YOLO

    ref = YOLO(str(path))
    ours = LibreYOLO(str(path))
    assert ours.arch == {"box_groups": 1} and ours.names == trained.names
    r_ref = ref.predict(str(SAMPLE_IMAGE), conf=0.25, iou=0.7, verbose=False)[0].boxes
    r_ours = ours.predict(str(SAMPLE_IMAGE), conf=0.25, iou=0.7)[0].boxes
    assert len(r_ours) >= 5 and len(r_ours) == len(r_ref)
    ref_xyxy, ref_cls, ref_conf = r_ref.xyxy.cpu().float(), r_ref.cls.cpu(), r_ref.conf.cpu().float()
    for box, c, sc in zip(r_ours.xyxy.cpu().float(), r_ours.cls.cpu(), r_ours.conf.cpu().float(), strict=True):
        near = ((ref_xyxy - box).abs().max(1).values <= 1.0) & (ref_cls == c) & ((ref_conf - sc).abs() <= 1e-3)
        assert near.any(), (box, c, sc)
