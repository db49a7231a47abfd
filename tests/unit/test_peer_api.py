"""Side by side with Ultralytics: the same inputs give the same kind of outputs (issue 20).

A user switching from Ultralytics should find the same source types, the same ``Results`` fields
with the same shapes, dtypes and colour order, the same label-file lines and crop folders, the
same predict keywords with the same meaning, and the mAP50-95 of ``val()`` under a known name.
Each test runs both libraries on one input and asserts the property on both; where the two
differ on purpose the test pins both behaviours, and docs/faq.md ("Coming from Ultralytics")
gives the mapping or the workaround.

The models: libreyolo's bundled trained ``LibreYOLO9t.pt`` and an *untrained* Ultralytics
``yolov8n.yaml`` (no weights are downloaded; the comparison is of the API, not of accuracy). An
untrained Ultralytics head scores every box near 1e-5, so its predictions here use ``conf=1e-9``
to have boxes at all (they are all of class 0). Ultralytics is a test-only reference (the ``ref``
extra); the module skips without it.
"""

from __future__ import annotations

import json
import operator
import os
import shutil
import tempfile
import types
from pathlib import Path

import numpy as np
import pytest
import torch

os.environ.setdefault("YOLO_OFFLINE", "true")
os.environ.setdefault("YOLO_CONFIG_DIR", tempfile.mkdtemp(prefix="ulcfg-"))
pytest.importorskip("ultralytics", reason="the side-by-side API test needs Ultralytics (pip install libreyolo[ref])")
cv2 = pytest.importorskip("cv2", reason="the side-by-side API test writes images and a video with OpenCV")
from PIL import Image  # noqa: E402

import libreyolo  # noqa: E402

IMGSZ = 64
PEER_CONF = 1e-9  # an untrained Ultralytics head scores ~1e-5; below that every anchor is a box
RED_BGR, BLUE_BGR = [0, 0, 255], [255, 0, 0]


# ---------------------------------------------------------------------------- fixtures
@pytest.fixture(scope="module")
def lib():
    return libreyolo.LibreYOLO("LibreYOLO9t.pt", device="cpu")


@pytest.fixture(scope="module")
def ul():
    from ultralytics import YOLO

    return YOLO("yolov8n.yaml")


def ours(model, source, **kw):
    kw.setdefault("imgsz", IMGSZ)
    kw.setdefault("device", "cpu")
    return model.predict(source, **kw)


# Ultralytics keeps most keywords of one predict() call for the next calls on the same model
# (max_det=1 once, one box ever after; test_keywords_apply_to_one_call_in_libreyolo_only), so
# every peer call passes the defaults of the keywords these tests vary.
PEER_DEFAULTS = {"imgsz": IMGSZ, "device": "cpu", "conf": PEER_CONF, "verbose": False, "iou": 0.7,
                 "classes": None, "max_det": 300, "half": False, "save_txt": False, "save_conf": False,
                 "save_crop": False}


def peer(model, source, **kw):
    return model.predict(source, **{**PEER_DEFAULTS, **kw})


def _coloured(h: int, w: int) -> np.ndarray:
    """BGR: the left half pure red, the right half pure blue."""
    img = np.zeros((h, w, 3), np.uint8)
    img[:, : w // 2] = RED_BGR
    img[:, w // 2:] = BLUE_BGR
    return img


@pytest.fixture(scope="module")
def media(tmp_path_factory):
    """Lossless images of two sizes, a scene with objects, a 3-frame video, a list file."""
    root = tmp_path_factory.mktemp("peer_media")
    folder = root / "folder"
    folder.mkdir()
    cv2.imwrite(str(folder / "a.png"), _coloured(48, 64))
    cv2.imwrite(str(folder / "b.png"), _coloured(40, 64))
    scene = cv2.resize(cv2.imread(str(libreyolo.SAMPLE_IMAGE)), (96, 64))  # has shapes LibreYOLO9t finds
    cv2.imwrite(str(root / "scene.png"), scene)
    video = root / "clip.avi"
    vw = cv2.VideoWriter(str(video), cv2.VideoWriter_fourcc(*"MJPG"), 5, (64, 48))
    for _ in range(3):
        vw.write(_coloured(48, 64))
    vw.release()
    listing = root / "list.txt"
    listing.write_text("folder/a.png\nfolder/b.png\n")
    return {"root": root, "folder": folder, "a": folder / "a.png", "b": folder / "b.png",
            "scene": root / "scene.png", "video": video, "list": listing}


@pytest.fixture(scope="module")
def scene_results(lib, ul, media):
    return ours(lib, str(media["scene"]), conf=0.05)[0], peer(ul, str(media["scene"]))[0]


# ---------------------------------------------------------------------------- sources
def _sources(m):
    """name -> (source, orig_shapes, libreyolo paths, Ultralytics paths)."""
    a, b = str(m["a"]), str(m["b"])
    sa, sb = (48, 64), (40, 64)
    return {
        "str": (a, [sa], [a], [a]),
        "pathlib": (Path(a), [sa], [a], [a]),
        "folder": (str(m["folder"]), [sa, sb], [a, b], [a, b]),
        "glob": (str(m["folder"] / "a.*"), [sa], [a], [a]),
        "txt": (str(m["list"]), [sa, sb], [a, b], [a, b]),
        "list": ([a, Path(b)], [sa, sb], [a, b], [a, b]),
        # in-memory images: libreyolo's path is None, Ultralytics' a made-up 'image0.jpg' (or
        # the file a PIL image was opened from): docs/faq.md
        "pil": (lambda: Image.open(a), [sa], [None], [a]),
        "numpy": (lambda: cv2.imread(a), [sa], [None], ["image0.jpg"]),
        "tensor": (lambda: torch.rand(2, 3, 32, 64), [(32, 64)] * 2, [None, None], ["image0.jpg", "image1.jpg"]),
        "video": (str(m["video"]), [(48, 64)] * 3, [str(m["video"])] * 3, [str(m["video"])] * 3),
    }


@pytest.mark.parametrize("kind", ["str", "pathlib", "folder", "glob", "txt", "list", "pil", "numpy", "tensor",
                                  "video"])
def test_each_source_type_gives_the_same_results_shapes_and_paths(lib, ul, media, kind):
    source, shapes, our_paths, peer_paths = _sources(media)[kind]
    make = source if callable(source) else (lambda: source)
    mine, theirs = ours(lib, make()), peer(ul, make())
    assert isinstance(mine, list) and isinstance(theirs, list)
    assert [r.orig_shape for r in mine] == shapes == [tuple(r.orig_shape) for r in theirs]
    assert [r.path for r in mine] == our_paths
    assert [r.path for r in theirs] == peer_paths
    for r in mine + theirs:
        assert r.orig_img.dtype == np.uint8 and r.orig_img.shape == (*r.orig_shape, 3)
    if kind == "video":  # libreyolo numbers the frames; Ultralytics' Results carry no frame index
        assert [r.frame for r in mine] == [0, 1, 2]
        assert not hasattr(theirs[0], "frame")
    else:
        assert {r.frame for r in mine} == {None}


def test_orig_img_is_bgr_in_both_for_files_arrays_and_pil(lib, ul, media):
    bgr = cv2.imread(str(media["a"]))
    pil = Image.fromarray(np.ascontiguousarray(bgr[:, :, ::-1]))  # the same pixels, RGB
    for source in (str(media["a"]), bgr, pil):
        for r in (ours(lib, source)[0], peer(ul, source)[0]):
            assert r.orig_img[10, 5].tolist() == RED_BGR and r.orig_img[10, 60].tolist() == BLUE_BGR
            np.testing.assert_array_equal(r.orig_img, bgr)


def test_a_tensor_is_rgb_in_both_but_only_libreyolo_keeps_orig_img_bgr(lib, ul):
    t = torch.zeros(1, 3, 32, 32)
    t[:, 0] = 1.0  # pure red, RGB
    mine, theirs = ours(lib, t)[0], peer(ul, t)[0]
    assert mine.orig_img[0, 0].tolist() == RED_BGR  # converted: BGR like every other source
    assert theirs.orig_img[0, 0].tolist() == [255, 0, 0]  # the tensor's order as is: docs/faq.md
    # Ultralytics takes only tensors whose sides are multiples of 32; libreyolo letterboxes any size
    odd = torch.rand(1, 3, 30, 45)
    assert ours(lib, odd)[0].orig_shape == (30, 45)
    with pytest.raises(ValueError, match="divisible by stride"):
        peer(ul, odd)


def test_plot_returns_bgr_uint8_of_the_original_size(lib, ul, media, scene_results):
    for r in (ours(lib, str(media["a"]), conf=1.0)[0], peer(ul, str(media["a"]), conf=1.0)[0]):
        assert len(r) == 0
        out = r.plot()
        assert out.dtype == np.uint8 and out.shape == (48, 64, 3)
        np.testing.assert_array_equal(out, r.orig_img)  # nothing drawn: the BGR original
        assert out is not r.orig_img
    for r in scene_results:
        assert len(r) > 0
        out = r.plot()
        assert out.dtype == np.uint8 and out.shape == (64, 96, 3) and not np.array_equal(out, r.orig_img)


# ---------------------------------------------------------------------------- Results
def test_boxes_fields_have_the_same_shapes_dtypes_and_conventions(scene_results):
    for r in scene_results:
        n = len(r)
        assert n > 0
        h, w = r.orig_shape
        b = r.boxes
        for name, shape in (("xyxy", (n, 4)), ("xywh", (n, 4)), ("xyxyn", (n, 4)), ("xywhn", (n, 4)),
                            ("conf", (n,)), ("cls", (n,)), ("data", (n, 6))):
            v = getattr(b, name)
            assert isinstance(v, torch.Tensor) and tuple(v.shape) == shape, name
            assert v.dtype == torch.float32, name
        scale = torch.tensor([w, h, w, h], dtype=torch.float32)
        torch.testing.assert_close(b.xyxyn, b.xyxy / scale)
        torch.testing.assert_close(b.xywhn, b.xywh / scale)
        torch.testing.assert_close(b.xywh[:, :2], (b.xyxy[:, :2] + b.xyxy[:, 2:]) / 2)
        torch.testing.assert_close(b.data[:, :4], b.xyxy)
        torch.testing.assert_close(b.data[:, 4], b.conf)
        torch.testing.assert_close(b.data[:, 5], b.cls)
        assert bool((b.xyxy[:, [0, 2]] <= w).all() and (b.xyxy[:, [1, 3]] <= h).all() and (b.xyxy >= 0).all())
        assert bool((b.cls == b.cls.round()).all())


def test_names_is_an_int_to_str_dict_covering_every_class(lib, ul, scene_results):
    for model, r in zip((lib, ul), scene_results, strict=True):
        assert type(r.names) is dict and type(model.names) is dict
        assert all(type(k) is int and type(v) is str for k, v in r.names.items())
        assert sorted(r.names) == list(range(len(r.names)))
        assert {int(c) for c in r.boxes.cls.tolist()} <= set(r.names)
    assert len(scene_results[0].names) == 6 and len(scene_results[1].names) == 80  # shapes; COCO (untrained)


def test_cpu_and_numpy_return_results_of_the_same_class(scene_results):
    for r in scene_results:
        c, n = r.cpu(), r.numpy()
        assert type(c) is type(r) and type(n) is type(r)
        assert c.boxes.data.device.type == "cpu"
        assert isinstance(n.boxes.xyxy, np.ndarray) and n.boxes.xyxy.dtype == np.float32
        assert isinstance(n.boxes.cls, np.ndarray) and n.boxes.data.shape == (len(r), 6)
        assert isinstance(r.boxes.xyxy, torch.Tensor)  # numpy() is a copy


def test_speed_has_the_three_stage_keys_in_both(scene_results):
    mine, theirs = scene_results
    stages = {"preprocess", "inference", "postprocess"}
    assert set(theirs.speed) == stages
    assert set(mine.speed) == stages | {"results"}  # libreyolo also times building the Results
    for r in scene_results:
        assert all(isinstance(v, float) and v >= 0 for v in r.speed.values())
        assert r.speed["inference"] > 0


def test_summary_and_to_json_have_the_same_record_layout(scene_results):
    for r in scene_results:
        rows = r.summary()
        assert isinstance(rows, list) and len(rows) == len(r)
        assert set(rows[0]) == {"name", "class", "confidence", "box"}
        assert set(rows[0]["box"]) == {"x1", "y1", "x2", "y2"}
        assert rows[0]["name"] == r.names[rows[0]["class"]]
        assert json.loads(r.to_json()) == json.loads(json.dumps(rows))
        norm = r.summary(normalize=True)
        assert all(0.0 <= v <= 1.0 for row in norm for v in row["box"].values())
        assert norm[0]["box"]["x2"] == pytest.approx(rows[0]["box"]["x2"] / r.orig_shape[1], abs=1e-4)


def _label_rows(file: Path) -> list[list[float]]:
    return [[float(v) for v in line.split()] for line in file.read_text().splitlines()]


def test_save_txt_writes_normalised_class_cx_cy_w_h_and_optional_conf(scene_results, tmp_path):
    for tag, r in zip(("ours", "peer"), scene_results, strict=True):
        plain, with_conf = tmp_path / f"{tag}.txt", tmp_path / f"{tag}_conf.txt"
        r.save_txt(plain)
        r.save_txt(with_conf, save_conf=True)
        rows, rows_c = _label_rows(plain), _label_rows(with_conf)
        assert len(rows) == len(rows_c) == len(r)
        assert {len(x) for x in rows} == {5} and {len(x) for x in rows_c} == {6}
        got = {tuple(x) for x in rows}
        for cls, xywhn, conf in zip(r.boxes.cls.tolist(), r.boxes.xywhn.tolist(), r.boxes.conf.tolist(),
                                     strict=True):
            assert any(int(g[0]) == cls and np.allclose(g[1:5], xywhn, atol=1e-4) for g in got)
            assert any(np.allclose(g[1:5], xywhn, atol=1e-4) and g[5] == pytest.approx(conf, rel=1e-3, abs=1e-9)
                       for g in rows_c)
        assert all(0.0 <= v <= 1.0 for x in rows for v in x[1:5])


def test_save_crop_writes_one_jpg_per_box_under_the_class_name(scene_results, tmp_path):
    for tag, r in zip(("ours", "peer"), scene_results, strict=True):
        two = r[:2]
        folder = tmp_path / tag
        two.save_crop(folder, file_name=Path("crop.jpg"))  # Ultralytics' own calling style
        names = [two.names[int(c)] for c in two.boxes.cls.tolist()]
        files = sorted(p.relative_to(folder) for p in folder.rglob("*") if p.is_file())
        assert len(files) == 2
        assert {p.parts[0] for p in files} == set(names)
        assert all(len(p.parts) == 2 and p.suffix == ".jpg" and p.stem.startswith("crop") for p in files)
        assert Path(names[0], "crop.jpg") in files  # not crop.jpg.jpg
        assert cv2.imread(str(folder / files[0])) is not None
    # without file_name the names differ: libreyolo the source's stem, Ultralytics 'im' (docs/faq.md)
    mine, theirs = scene_results
    mine[:1].save_crop(tmp_path / "d_ours")
    theirs[:1].save_crop(tmp_path / "d_peer")
    assert [p.name for p in (tmp_path / "d_ours").rglob("*.jpg")] == ["scene.jpg"]
    assert [p.name for p in (tmp_path / "d_peer").rglob("*.jpg")] == ["im.jpg"]


def test_predict_save_txt_and_save_crop_lay_out_the_run_folder_alike(lib, ul, media, tmp_path):
    for src in (str(media["scene"]), str(media["video"])):  # Ultralytics refuses an image + video list
        ours(lib, src, conf=0.001, max_det=1, save_txt=True, save_crop=True, save_dir=tmp_path / "ours")
        peer(ul, src, max_det=1, save_txt=True, save_crop=True, project=str(tmp_path), name="peer", exist_ok=True)

    def layout(root: Path, sub: str) -> list[str]:
        return sorted(str(p.relative_to(root / sub)) for p in (root / sub).rglob("*") if p.is_file())

    mine, theirs = layout(tmp_path / "ours", "labels"), layout(tmp_path / "peer", "labels")
    assert "scene.txt" in mine and "scene.txt" in theirs  # images: labels/<stem>.txt
    # video frames: libreyolo clip_<0-based frame, 6 digits>, Ultralytics clip_<1-based frame>
    assert [f for f in mine if f.startswith("clip")] == ["clip_000000.txt", "clip_000001.txt", "clip_000002.txt"]
    assert [f for f in theirs if f.startswith("clip")] == ["clip_1.txt", "clip_2.txt", "clip_3.txt"]
    for root in (tmp_path / "ours", tmp_path / "peer"):
        crops = layout(root, "crops")
        assert crops and all(len(Path(c).parts) == 2 and c.endswith(".jpg") for c in crops)  # crops/<class>/<x>.jpg
        assert any(Path(c).name.startswith("scene") for c in crops)


# ---------------------------------------------------------------------------- predict keywords
def test_stream_true_returns_a_generator_of_the_same_results(lib, ul, media):
    for model, run in ((lib, ours), (ul, peer)):
        gen = run(model, str(media["folder"]), stream=True)
        assert isinstance(gen, types.GeneratorType)
        assert [r.orig_shape for r in gen] == [(48, 64), (40, 64)]


def test_conf_iou_classes_max_det_keep_the_same_meaning(lib, ul, media, scene_results):
    scene = str(media["scene"])
    for model, run, base, low in ((lib, ours, scene_results[0], 0.001), (ul, peer, scene_results[1], PEER_CONF)):
        everything = run(model, scene, conf=low)[0]
        assert len(everything) > 1
        # conf: a floor on every box's confidence
        floor = float(everything.boxes.conf.median())
        kept = run(model, scene, conf=floor)[0]
        assert 0 < len(kept) < len(everything) and bool((kept.boxes.conf >= floor - 1e-6).all())
        assert len(run(model, scene, conf=1.0)[0]) == 0
        # classes: only the listed class ids
        c = int(everything.boxes.cls[0])
        only = run(model, scene, conf=low, classes=[c])[0]
        assert len(only) > 0 and set(only.boxes.cls.tolist()) == {float(c)}
        absent = next(k for k in model.names if k not in set(everything.boxes.cls.int().tolist()))
        assert len(run(model, scene, conf=low, classes=[absent])[0]) == 0
        # max_det: at most that many, the most confident first
        one = run(model, scene, conf=low, max_det=1)[0]
        assert len(one) == 1 and float(one.boxes.conf[0]) == pytest.approx(float(everything.boxes.conf.max()), rel=1e-4)
        # iou: a lower NMS threshold keeps no more boxes
        assert len(run(model, scene, conf=low, iou=0.05)[0]) <= len(run(model, scene, conf=low, iou=0.95)[0])
        assert len(base) > 0


def test_keywords_apply_to_one_call_in_libreyolo_only(lib, media):
    from ultralytics import YOLO

    scene = str(media["scene"])
    assert len(ours(lib, scene, conf=0.001, max_det=1)[0]) == 1
    assert len(ours(lib, scene, conf=0.001)[0]) > 1  # back to the default max_det=300
    fresh = YOLO("yolov8n.yaml")
    kw = {"imgsz": IMGSZ, "device": "cpu", "conf": PEER_CONF, "verbose": False}
    assert len(fresh.predict(scene, **kw)[0]) > 1
    assert len(fresh.predict(scene, max_det=1, **kw)[0]) == 1
    assert len(fresh.predict(scene, **kw)[0]) == 1  # Ultralytics kept max_det=1: docs/faq.md


def test_imgsz_changes_the_network_input_but_not_the_output_coordinates(lib, ul, media):
    scene = str(media["scene"])
    for model, run, low in ((lib, ours, 0.001), (ul, peer, PEER_CONF)):
        small, large = run(model, scene, conf=low, imgsz=32)[0], run(model, scene, conf=low, imgsz=128)[0]
        assert small.orig_shape == large.orig_shape == (64, 96)
        assert len(small) > 0 and len(large) > 0
        assert not (len(small) == len(large) and torch.equal(small.boxes.data, large.boxes.data))
        for r in (small, large):
            assert float(r.boxes.xyxy[:, [0, 2]].max()) <= 96 and float(r.boxes.xyxy[:, [1, 3]].max()) <= 64


def test_half_is_accepted_and_boxes_stay_float32(ul, media):
    fresh = libreyolo.LibreYOLO("LibreYOLO9t.pt", device="cpu")  # half casts the prepared weights once
    for r in (ours(fresh, str(media["scene"]), conf=0.05, half=True)[0], peer(ul, str(media["scene"]), half=True)[0]):
        assert len(r) > 0 and r.boxes.data.dtype == torch.float32 and r.boxes.xyxy.shape[1] == 4


# ---------------------------------------------------------------------------- val
# The mapping of docs/faq.md: libreyolo's val() returns a dict (DetMetrics) keyed by metric name;
# Ultralytics' returns an object with a `box` attribute.
VAL_MAPPING = {
    "mAP50-95": "box.map",
    "mAP50": "box.map50",
    "precision": "box.mp",
    "recall": "box.mr",
    "fitness": "fitness",
}


def test_val_exposes_map50_95_in_both_under_the_documented_names(media, tmp_path):
    from ultralytics import YOLO

    from libreyolo.data.shapes import ensure_shapes_dataset

    data = ensure_shapes_dataset(tmp_path / "shapes", n_train=2, n_val=2, imgsz=64)
    lib = libreyolo.LibreYOLO("LibreYOLO9t.pt", device="cpu")
    m = lib.val(data=str(data), imgsz=64, batch=2, workers=0, device="cpu", verbose=False)
    v = YOLO("yolov8n.yaml").val(data=str(data), imgsz=64, batch=2, workers=0, device="cpu", verbose=False,
                                 plots=False, project=str(tmp_path / "runs"), name="val")
    for ours_key, peer_attr in VAL_MAPPING.items():
        a, b = m[ours_key], operator.attrgetter(peer_attr)(v)
        assert isinstance(a, float) and 0.0 <= a <= 1.0, ours_key
        assert 0.0 <= float(b) <= 1.0, peer_attr
    assert m["mAP50-95"] <= m["mAP50"] and v.box.map <= v.box.map50
    assert float(v.results_dict["metrics/mAP50-95(B)"]) == pytest.approx(float(v.box.map))
    assert m["mAP50-95"] > 0  # the trained weights find some of the shapes
    assert len(m.maps) == 6 and len(v.box.maps) == 80  # per-class mAP50-95, indexed by class id
    assert {"preprocess", "inference", "postprocess"} <= set(m.speed) & set(v.speed)
    shutil.rmtree(tmp_path / "runs", ignore_errors=True)
