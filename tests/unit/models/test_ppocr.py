"""PP-OCR: deployed parameter counts against the published PP-OCRv4 mobile ONNX models, branch
fusion, the detector / recogniser seam, the ocr task's user path (predict -> Results.texts, plot,
save, to_json; train and val on the text-demo set and on a user folder; ONNX export)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest
import torch
from _rapidocr import rapid_models

from libreyolo.data.ocr import load_ocr_data, read_labels
from libreyolo.data.shapes_ocr import ensure_text_demo_dataset, render_text_scene
from libreyolo.graphs.seam import run_eager
from libreyolo.model import Model
from libreyolo.models.ppocr.family import PPOCR
from libreyolo.models.ppocr.postprocess import crop_regions, db_boxes

DEPLOYED = {"det": 1_171_593, "rec": 2_688_509}  # PP-OCRv4 mobile, counted from the rapidocr 1.4.4 ONNX files


def _deployed_counts(fam: PPOCR) -> dict[str, int]:
    fam.net.eval()
    fam.fuse()
    n = lambda m: sum(p.numel() for p in m.parameters())  # noqa: E731
    return {"det": n(fam.net.det) - n(fam.net.det.thresh), "rec": n(fam.net.rec)}  # thresh branch: training only


def test_v4_deployed_parameter_counts_equal_the_published_models() -> None:
    fam = PPOCR(size="v4", nc=6624)  # ppocr_keys_v1: 6623 characters + space (+ the CTC blank)
    assert _deployed_counts(fam) == DEPLOYED


def _onnx_weight_count(path: Path) -> int:
    onnx = pytest.importorskip("onnx")
    from onnx import numpy_helper

    total = 0
    for nd in onnx.load(str(path)).graph.node:
        name = nd.output[0]
        if nd.op_type != "Constant" or name.startswith(("p2o.", "fill_constant")):
            continue
        if re.match(r".*batch_norm.*\.w_[12]$", name):  # running mean / variance: buffers
            continue
        total += numpy_helper.to_array(nd.attribute[0].t).size
    return total


def test_counts_match_the_onnx_weights_shipped_in_rapidocr() -> None:
    models = rapid_models()
    assert _onnx_weight_count(models / "ch_PP-OCRv4_det_infer.onnx") == DEPLOYED["det"]
    assert _onnx_weight_count(models / "ch_PP-OCRv4_rec_infer.onnx") == DEPLOYED["rec"]


def test_converted_rapidocr_models_match_onnxruntime() -> None:
    """Fidelity: the PP-OCRv4 mobile ONNX weights load into our fused networks, whose outputs equal
    ONNX Runtime's on the same normalised inputs (fp32, CPU)."""
    ort = pytest.importorskip("onnxruntime")
    from libreyolo.models.ppocr.convert import PaddleDetBody, PaddleRecBody, from_paddle_onnx

    models = rapid_models()
    det, rec = models / "ch_PP-OCRv4_det_infer.onnx", models / "ch_PP-OCRv4_rec_infer.onnx"
    fam = from_paddle_onnx(PPOCR(size="v4", nc=6624), det, rec)
    torch.manual_seed(0)
    z, zr = torch.randn(1, 3, 96, 128), torch.randn(2, 3, 48, 320)
    with torch.no_grad():
        ours_det, ours_rec = PaddleDetBody(fam.net.det)(z), PaddleRecBody(fam.net.rec)(zr)
    run = lambda p, x: torch.from_numpy(ort.InferenceSession(str(p), providers=["CPUExecutionProvider"])  # noqa: E731
                                        .run(None, {"x": x.numpy()})[0])
    ref_det, ref_rec = run(det, z), run(rec, zr)
    assert ours_det.shape == ref_det.shape == (1, 1, 96, 128) and ours_rec.shape == ref_rec.shape == (2, 40, 6625)
    assert torch.allclose(ours_det, ref_det, rtol=1e-5, atol=1e-6), float((ours_det - ref_det).abs().max())
    assert torch.allclose(ours_rec, ref_rec, rtol=1e-5, atol=1e-5), float((ours_rec - ref_rec).abs().max())


def test_converted_pp_ocrv4_reads_rendered_words() -> None:
    """End to end with PaddleOCR's weights: Pillow-rendered words are found and read exactly."""
    pytest.importorskip("onnx")
    from PIL import Image, ImageDraw, ImageFont

    from libreyolo.models.ppocr.convert import from_paddle_onnx, paddle_onnx_chars

    models = rapid_models()
    rec = models / "ch_PP-OCRv4_rec_infer.onnx"
    chars = paddle_onnx_chars(rec)
    assert len(chars) == 6624 and chars[-1] == " "
    m = Model(from_paddle_onnx(PPOCR(size="v4", names=chars), models / "ch_PP-OCRv4_det_infer.onnx", rec))
    im = Image.new("RGB", (320, 120), (255, 255, 255))
    draw = ImageDraw.Draw(im)
    draw.text((20, 20), "Hello World 123", fill=(0, 0, 0), font=ImageFont.load_default(size=28))
    draw.text((30, 70), "libreyolo", fill=(20, 20, 120), font=ImageFont.load_default(size=24))
    r = m.predict(np.asarray(im)[:, :, ::-1].copy(), imgsz=320, conf=0.5)[0]
    assert r.texts.strings == ["Hello World 123", "libreyolo"]
    assert bool((r.texts.scores > 0.9).all()) and float(r.texts.polygons[0, :, 1].min()) < 30


def _randomise_bn(net: torch.nn.Module) -> None:
    g = torch.Generator().manual_seed(1)
    for m in net.modules():
        if isinstance(m, torch.nn.BatchNorm2d):
            m.running_mean.copy_(torch.randn(m.num_features, generator=g) * 0.1)
            m.running_var.copy_(torch.rand(m.num_features, generator=g) + 0.5)
            m.weight.data.copy_(torch.rand(m.num_features, generator=g) + 0.5)


def test_fusing_the_rep_branches_keeps_the_outputs() -> None:
    torch.manual_seed(0)
    fam = PPOCR(size="tiny")
    _randomise_bn(fam.net)
    fam.net.eval()
    x, crops = torch.rand(1, 3, 64, 64), torch.rand(2, 3, 48, 96)
    with torch.no_grad():
        det, rec = fam.net(x), fam.net.rec(crops)
        fam.fuse()
        assert torch.allclose(fam.net(x), det, atol=1e-4) and torch.allclose(fam.net.rec(crops), rec, atol=1e-4)
    assert rec.shape == (2, 12, fam.nc + 1)


def _texty(fam: PPOCR) -> PPOCR:
    """A random model whose detector answers 'text everywhere' (one region: the whole input)."""
    torch.nn.init.constant_(fam.net.det.binarize.conv3.bias, 8.0)
    torch.nn.init.zeros_(fam.net.det.binarize.conv3.weight)
    return fam


def test_seam_detector_captured_recogniser_eager_equals_the_chain() -> None:
    torch.manual_seed(0)
    fam = _texty(PPOCR(size="tiny"))
    stages = fam.forward_stages()
    assert [(s.name, s.capturable) for s in stages] == [("detector", True), ("recogniser", False)]
    assert "per-region" in stages[1].reason
    x = torch.rand(2, 3, 64, 96)
    with torch.inference_mode():
        chained = run_eager(stages, x)
        prob = fam.net(x)
        manual = stages[1].fn((x, prob))
    assert torch.equal(chained[0], prob) and prob.shape == (2, 1, 64, 96)
    prob_, quads, index, scores, probs, angle = chained
    assert quads.shape == (2, 4, 2) and index.tolist() == [0, 1] and probs.shape == (2, 12, fam.nc + 1)
    assert angle.shape == (2, 0)  # no classifier weights loaded: not classified
    assert all(torch.equal(a, b) for a, b in zip(chained, manual, strict=True))


def test_db_boxes_and_crops() -> None:
    p = np.zeros((64, 128), np.float32)
    p[20:30, 10:70] = 0.95
    quads, scores = db_boxes(p)
    assert len(quads) == 1 and scores[0] > 0.9
    q = quads[0]
    assert q[0, 0] < 10 and q[2, 0] > 69 and q[0, 1] < 20 and q[2, 1] > 29  # unclipped outwards
    img = torch.zeros(1, 3, 64, 128)
    img[:, :, 20:30, 10:70] = 1.0
    crop = crop_regions(img, torch.tensor([0]), torch.from_numpy(quads), (48, 320))
    assert crop.shape == (1, 3, 48, 320) and float(crop[0, :, 24, :40].mean()) > 0.5
    assert float(crop[0, :, :, -1].sub(0.5).abs().max()) == 0.0  # padding columns: mid grey


def test_predict_results_plot_save_and_json(tmp_path: Path) -> None:
    torch.manual_seed(0)
    m = Model(_texty(PPOCR(size="tiny")))
    img = np.full((48, 80, 3), 200, np.uint8)
    r = m.predict(img, imgsz=64)[0]
    assert len(r) == 1 and r.boxes is None and r.texts is not None
    poly = r.texts.polygons[0]
    assert poly.shape == (4, 2) and float(poly[:, 0].max()) <= 80 and float(poly[:, 1].max()) <= 48
    assert isinstance(r.texts.strings[0], str) and 0 <= float(r.texts.scores[0]) <= 1
    drawn = r.plot()
    assert drawn.shape == img.shape and bool((drawn != img).any())
    out = r.save(tmp_path / "ocr.png")
    assert out.is_file()
    row = json.loads(r.to_json())[0]
    assert set(row) == {"text", "confidence", "box_confidence", "angle", "polygon", "box"} and len(row["polygon"]) == 4
    assert row["angle"] == 0 and r.texts.angles.tolist() == [0]
    assert m.predict(img, imgsz=64, conf=0.99999)[0].texts.strings == []  # conf: the box threshold


def test_text_demo_is_byte_identical_and_readable(tmp_path: Path) -> None:
    a, wa = render_text_scene(0, 0, 3, imgsz=96)
    b, wb = render_text_scene(0, 0, 3, imgsz=96)
    assert a.tobytes() == b.tobytes() and [w for _, w in wa] == [w for _, w in wb]
    y = ensure_text_demo_dataset(tmp_path, n_train=2, n_val=1, imgsz=64)
    cfg = load_ocr_data(str(y))
    quads, texts = read_labels(cfg.root / "labels" / "train" / "train_000000.txt")
    assert quads.shape[1:] == (4, 2) and all(t.isalnum() for t in texts) and cfg.nc == 95


def test_train_and_val_on_the_text_demo(tmp_path: Path) -> None:
    torch.manual_seed(0)
    y = ensure_text_demo_dataset(tmp_path / "d", n_train=4, n_val=2, imgsz=64)
    m = Model(PPOCR(size="tiny"))
    before = {k: v.clone() for k, v in m.net.state_dict().items()}
    out = m.train(data=str(y), epochs=1, imgsz=64, batch=2, device="cpu", workers=0, project=str(tmp_path),
                  name="t", plots=False, val=True)
    assert {"hmean", "rec_acc", "norm_edit_dis", "precision", "recall"} <= set(out)
    after = m.net.state_dict()
    assert any(not torch.equal(before[k], after[k]) for k in before if k.startswith("det."))
    assert any(not torch.equal(before[k], after[k]) for k in before if k.startswith("rec."))
    metrics = m.val(data=str(y), imgsz=64, batch=2, device="cpu", verbose=False)
    assert 0 <= metrics["hmean"] <= 1 and 0 <= metrics["norm_edit_dis"] <= 1


def test_criterion_terms_are_finite_and_backpropagate() -> None:
    torch.manual_seed(0)
    fam = PPOCR(size="tiny")
    fam.net.train()
    crit = fam.build_criterion()
    batch = {"img": torch.randint(0, 255, (1, 3, 64, 64), dtype=torch.uint8),
             "polys": [np.array([[[8, 10], [56, 10], [56, 30], [8, 30]]], np.float32)], "texts": [["ab1"]]}
    loss, items = crit(fam.net(batch["img"].float() / 255), batch)
    loss.backward()
    assert items.shape == (4,) and bool(torch.isfinite(items).all()) and float(items[3]) > 0
    assert fam.net.rec.fc.weight.grad is not None and fam.net.det.binarize.conv1.weight.grad is not None


def test_user_dataset_with_a_dictionary_file(tmp_path: Path) -> None:
    (tmp_path / "images" / "train").mkdir(parents=True)
    (tmp_path / "labels" / "train").mkdir(parents=True)
    import cv2

    cv2.imwrite(str(tmp_path / "images" / "train" / "a.png"), np.full((40, 60, 3), 255, np.uint8))
    (tmp_path / "labels" / "train" / "a.txt").write_text("5,5,50,5,50,20,5,20,abc\n1,1,2,1,2,2,1,2,###\n")
    (tmp_path / "keys.txt").write_text("a\nb\nc\n")
    (tmp_path / "data.yaml").write_text("train: images/train\nval: images/train\ndict: keys.txt\n")
    cfg = load_ocr_data(str(tmp_path / "data.yaml"))
    assert list(cfg.names.values()) == ["a", "b", "c", " "]
    fam = PPOCR(size="tiny", names=cfg.names)
    assert fam.nc == 4 and fam.net.rec.fc.out_features == 5
    metrics = Model(fam).val(data=str(tmp_path / "data.yaml"), imgsz=64, batch=1, device="cpu", verbose=False)
    assert metrics["regions"] == 1.0  # the ### region is not counted


def test_onnx_export_gives_the_same_regions(tmp_path: Path) -> None:
    pytest.importorskip("onnxruntime")
    from libreyolo import LibreYOLO

    torch.manual_seed(0)
    m = Model(_texty(PPOCR(size="tiny")))
    path = m.export(format="onnx", imgsz=64, file=str(tmp_path / "ppocr.onnx"))
    loaded = LibreYOLO(str(path))
    img = np.full((48, 80, 3), 180, np.uint8)
    a, b = m.predict(img, imgsz=64)[0], loaded.predict(img, imgsz=64)[0]
    assert len(a.texts) == len(b.texts) == 1
    assert torch.allclose(a.texts.polygons, b.texts.polygons, atol=1e-3)
    assert b.texts.strings == [""]  # the export holds the detector only


def test_saved_weights_load_by_name_with_their_dictionary(tmp_path: Path) -> None:
    from libreyolo import LibreYOLO

    torch.manual_seed(0)
    m = Model(_texty(PPOCR(size="tiny", names=["x", "y", "z", " "])))
    path = tmp_path / "LibrePPOCRtiny-ocr.pt"
    m.save(str(path))
    loaded = LibreYOLO(str(path))
    assert (loaded.FAMILY, loaded.task, loaded.names) == ("ppocr", "ocr", {0: "x", 1: "y", 2: "z", 3: " "})
    img = np.full((48, 80, 3), 200, np.uint8)
    a, b = m.predict(img, imgsz=64, fuse=False)[0], loaded.predict(img, imgsz=64, fuse=False)[0]
    assert a.texts.strings == b.texts.strings and torch.equal(a.texts.polygons, b.texts.polygons)
