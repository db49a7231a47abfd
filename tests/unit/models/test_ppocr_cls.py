"""PP-OCR angle classifier (0 / 180 degrees): parameter count against the ONNX export shipped in the
rapidocr_onnxruntime wheel, outputs against ONNX Runtime, the OCR chain turning upside-down lines
before reading them (predict(angle_cls=...), Results.texts.angles), its default, and its errors."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from _rapidocr import rapid_models

from libreyolo.errors import CheckpointError, ConfigError
from libreyolo.model import Model
from libreyolo.models.ppocr.cls import CLS_HW, AngleClassifier
from libreyolo.models.ppocr.family import PPOCR
from libreyolo.models.ppocr.postprocess import crop_regions

CLS_DEPLOYED = 129_356  # ch_ppocr_mobile_v2.0_cls_infer.onnx: weights without the BatchNorm running statistics
CLS_FILE = "ch_ppocr_mobile_v2.0_cls_infer.onnx"


def test_classifier_parameter_count_is_the_published_models() -> None:
    assert sum(p.numel() for p in AngleClassifier().parameters()) == CLS_DEPLOYED


def test_onnx_classifier_holds_that_many_weights() -> None:
    """Counted from the graph: every weight constant, less the BatchNorm mean / variance inputs."""
    onnx = pytest.importorskip("onnx")
    from onnx import numpy_helper

    graph = onnx.load(str(rapid_models() / CLS_FILE)).graph
    stats = {n for nd in graph.node if nd.op_type == "BatchNormalization" for n in nd.input[3:5]}
    sizes = {nd.output[0]: numpy_helper.to_array(nd.attribute[0].t).size for nd in graph.node
             if nd.op_type == "Constant" and not nd.output[0].startswith(("Constant@", "fill_constant"))}
    assert len(stats) == 2 * 35 and sum(v for k, v in sizes.items() if k not in stats) == CLS_DEPLOYED
    assert [d.dim_value for d in graph.output[0].type.tensor_type.shape.dim][1:] == [2]


def _render(words: list[tuple[str, tuple[int, int], int, tuple[int, int, int]]],
            size: tuple[int, int] = (320, 120)):  # noqa: ANN202
    from PIL import Image, ImageDraw, ImageFont

    im = Image.new("RGB", size, (255, 255, 255))
    draw = ImageDraw.Draw(im)
    for text, xy, px, fill in words:
        draw.text(xy, text, fill=fill, font=ImageFont.load_default(size=px))
    return im


WORDS = [("Hello World 123", (20, 20), 28, (0, 0, 0)), ("libreyolo", (30, 70), 24, (20, 20, 120))]  # test_ppocr's


def _word_crops(upside_down: bool) -> torch.Tensor:
    """Two rendered words cropped at the classifier's input size (RGB in [0, 1])."""
    im = _render(WORDS)
    img = torch.from_numpy(np.asarray(im.rotate(180) if upside_down else im).copy()).permute(2, 0, 1)[None] / 255.0
    boxes = [[14, 16, 250, 54], [24, 66, 160, 100]]  # around the two words, upright
    if upside_down:
        boxes = [[320 - x2, 120 - y2, 320 - x1, 120 - y1] for x1, y1, x2, y2 in boxes]
    quads = torch.tensor([[[x1, y1], [x2, y1], [x2, y2], [x1, y2]] for x1, y1, x2, y2 in boxes], dtype=torch.float32)
    return crop_regions(img, torch.zeros(2, dtype=torch.long), quads, CLS_HW)


def _loaded_family() -> PPOCR:
    pytest.importorskip("onnx")
    from libreyolo.models.ppocr.convert import load_angle_classifier

    fam = PPOCR(size="tiny")
    fam.net.eval()
    return load_angle_classifier(fam, rapid_models() / CLS_FILE)


def test_classifier_matches_onnxruntime_on_random_and_rendered_inputs() -> None:
    ort = pytest.importorskip("onnxruntime")
    from libreyolo.models.ppocr.convert import PaddleClsBody

    fam = _loaded_family()
    assert bool(fam.net.cls_loaded) and fam.angle_cls_enabled
    sess = ort.InferenceSession(str(rapid_models() / CLS_FILE), providers=["CPUExecutionProvider"])
    run = lambda z: torch.from_numpy(sess.run(None, {"x": z.numpy()})[0])  # noqa: E731
    torch.manual_seed(0)
    crops = torch.cat([_word_crops(False), _word_crops(True)])
    for z in (torch.randn(3, 3, 48, 192), torch.randn(2, 3, 48, 120)):  # already normalised
        with torch.no_grad():
            ours = PaddleClsBody(fam.net.cls)(z)
        ref = run(z)
        assert ours.shape == ref.shape == (len(z), 2)
        assert torch.allclose(ours, ref, rtol=0, atol=1e-5), float((ours - ref).abs().max())
    with torch.no_grad():
        ours = fam.net.cls(crops)  # RGB in [0, 1]: normalised inside
    ref = run((crops.flip(1) - 0.5) / 0.5)  # PaddleOCR's cls preprocessing: BGR, (x / 255 - 0.5) / 0.5
    assert torch.allclose(ours, ref, rtol=0, atol=1e-5), float((ours - ref).abs().max())
    assert ref.argmax(1).tolist() == [0, 0, 1, 1]  # ONNX Runtime itself: upright '0', turned '180'


def test_rendered_words_angles() -> None:
    fam = _loaded_family()
    up, up_p = fam.classify_angles(_word_crops(False))
    down, down_p = fam.classify_angles(_word_crops(True))
    assert up == [0, 0] and down == [180, 180]
    assert min(up_p + down_p) > 0.9


def test_upside_down_words_are_turned_and_read_end_to_end() -> None:
    pytest.importorskip("onnx")
    from libreyolo.models.ppocr.convert import from_paddle_onnx, paddle_onnx_chars

    models = rapid_models()
    rec = models / "ch_PP-OCRv4_rec_infer.onnx"
    fam = from_paddle_onnx(PPOCR(size="v4", names=paddle_onnx_chars(rec)), models / "ch_PP-OCRv4_det_infer.onnx",
                           rec, cls=models / CLS_FILE)
    m = Model(fam)
    im = _render(WORDS)
    bgr = lambda i: np.asarray(i)[:, :, ::-1].copy()  # noqa: E731
    up = m.predict(bgr(im), imgsz=320, conf=0.5)[0]  # angle_cls=None: on, the weights are loaded
    assert up.texts.strings == ["Hello World 123", "libreyolo"] and up.texts.angles.tolist() == [0, 0]
    down = m.predict(bgr(im.rotate(180)), imgsz=320, conf=0.5)[0]
    assert down.texts.strings == ["libreyolo", "Hello World 123"]  # reading order of the turned image
    assert down.texts.angles.tolist() == [180, 180] and bool((down.texts.angle_scores > 0.9).all())
    assert bool((down.texts.scores > 0.9).all())
    assert [row["angle"] for row in json.loads(down.to_json())] == [180, 180]
    off = m.predict(bgr(im.rotate(180)), imgsz=320, conf=0.5, angle_cls=False)[0]
    assert off.texts.angles.tolist() == [0, 0] and float(off.texts.angle_scores.abs().sum()) == 0.0
    assert "Hello World 123" not in off.texts.strings  # unturned, the recogniser cannot read it
    assert torch.equal(off.texts.polygons, down.texts.polygons)  # the polygons are the detected ones


def _texty_always_180(fam: PPOCR) -> PPOCR:
    """Detector: one region, the whole input; classifier: '180' with probability ~1."""
    torch.nn.init.constant_(fam.net.det.binarize.conv3.bias, 8.0)
    torch.nn.init.zeros_(fam.net.det.binarize.conv3.weight)
    torch.nn.init.zeros_(fam.net.cls.fc.weight)
    with torch.no_grad():
        fam.net.cls.fc.bias.copy_(torch.tensor([0.0, 10.0]))
    fam.net.cls_loaded.fill_(True)
    fam.net.eval()
    return fam


def test_turned_lines_are_read_from_the_opposite_corner() -> None:
    """The chain (no wheel needed): a line classified '180' is cropped for the recogniser turned
    by 180 degrees; with angle_cls=False it is not classified."""
    torch.manual_seed(0)
    fam = _texty_always_180(PPOCR(size="tiny"))
    stages = fam.forward_stages()
    x = torch.rand(1, 3, 64, 96)
    with torch.inference_mode():
        prob = fam.net(x)
        prob_, quads, index, scores, probs, angle = stages[1].fn((x, prob))
        assert angle.shape == (1, 2) and float(angle[0, 1]) > 0.99
        hw = tuple(fam.net.rec_hw)
        turned, upright = crop_regions(x, index, quads.roll(2, 1), hw), crop_regions(x, index, quads, hw)
        w = 72  # the text columns: 96 x 64 region at 48 px high; the rest is padding
        assert torch.allclose(turned[..., :w], upright[..., :w].flip(2, 3), atol=1e-5)  # 180 degrees
        assert not torch.allclose(turned, upright, atol=1e-2)
        assert torch.equal(probs, fam.net.rec(turned)) and not torch.equal(probs, fam.net.rec(upright))
        with fam.angle_classification(False):
            *_, probs_off, angle_off = stages[1].fn((x, prob))
        assert angle_off.shape == (1, 0) and torch.equal(probs_off, fam.net.rec(upright))
    out = fam.postprocess((prob_, quads, index, scores, probs, angle), conf=0.5)[0]
    assert out["angles"].tolist() == [180] and float(out["angle_scores"][0]) > 0.99


def test_default_follows_the_loaded_weights_and_is_saved(tmp_path: Path) -> None:
    from libreyolo import LibreYOLO

    torch.manual_seed(0)
    fam = PPOCR(size="tiny")
    assert not fam.angle_cls_enabled  # untrained classifier: off
    img = np.full((48, 80, 3), 200, np.uint8)
    m = Model(_texty_always_180(fam))
    assert fam.angle_cls_enabled
    assert m.predict(img, imgsz=64)[0].texts.angles.tolist() == [180]
    assert m.predict(img, imgsz=64, angle_cls=False)[0].texts.angles.tolist() == [0]
    path = tmp_path / "LibrePPOCRtiny-ocr.pt"
    m.save(str(path))
    loaded = LibreYOLO(str(path))
    assert bool(loaded.family.net.cls_loaded)
    assert loaded.predict(img, imgsz=64)[0].texts.angles.tolist() == [180]


def test_bad_input_gives_clear_errors(tmp_path: Path) -> None:
    m = Model(PPOCR(size="tiny"))
    img = np.full((48, 80, 3), 200, np.uint8)
    with pytest.raises(ConfigError, match="no weights.*load_angle_classifier"):
        m.predict(img, imgsz=64, angle_cls=True)
    with pytest.raises(ConfigError, match="angle_cls must be True, False or None"):
        m.predict(img, imgsz=64, angle_cls="yes")
    fam = m.family
    for bad in (torch.rand(2, 1, 48, 192), torch.rand(2, 3, 32, 192), torch.rand(3, 48, 192),
                torch.randint(0, 255, (1, 3, 48, 192))):
        with pytest.raises(ConfigError, match=r"Tensor\[n, 3, 48, w\]"):
            fam.classify_angles(bad)
    from libreyolo.models.ppocr.convert import load_angle_classifier

    with pytest.raises(CheckpointError, match="not found"):
        load_angle_classifier(fam, tmp_path / "missing.onnx")
    pytest.importorskip("onnx")
    junk = tmp_path / "junk.onnx"
    junk.write_bytes(b"not an onnx model")
    with pytest.raises(CheckpointError, match="not a readable ONNX model"):
        load_angle_classifier(fam, junk)
    assert not bool(fam.net.cls_loaded)


def test_a_recogniser_export_is_refused_as_a_classifier() -> None:
    pytest.importorskip("onnx")
    from libreyolo.models.ppocr.convert import load_angle_classifier

    fam = PPOCR(size="tiny")
    with pytest.raises(CheckpointError, match="6625 classes"):
        load_angle_classifier(fam, rapid_models() / "ch_PP-OCRv4_rec_infer.onnx")
    assert not bool(fam.net.cls_loaded)
