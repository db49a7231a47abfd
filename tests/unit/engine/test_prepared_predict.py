"""The prepared inference path (CPU): rect letterbox geometry, the prepared twin, the captured
decode's equivalence with the eager postprocess, and the honest speed breakdown."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from libreyolo.graphs.parity import randomise_norm_stats
from libreyolo.model import Model
from libreyolo.models.yolo9.family import YOLO9
from libreyolo.models.yolox.family import YOLOX
from libreyolo.ops.boxes import scale_boxes
from libreyolo.ops.candidates import select_detections
from libreyolo.ops.letterbox import letterbox_batch, letterbox_params, letterbox_shape


@pytest.fixture(autouse=True)
def _one_thread():
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


# --------------------------------------------------------------------------- rect letterbox
@pytest.mark.parametrize(("orig", "imgsz", "want"), [
    ((480, 640), (640, 640), (480, 640)),
    ((1080, 1920), (640, 640), (384, 640)),
    ((640, 480), (640, 640), (640, 480)),
    ((100, 333), (320, 320), (96, 320)),
    ((50, 50), (640, 640), (640, 640)),
])
def test_rect_shape_is_the_smallest_stride_multiple(orig, imgsz, want):
    assert letterbox_shape([orig], imgsz, stride=32) == want
    assert letterbox_shape([orig], imgsz, stride=32, rect=False) == imgsz
    assert letterbox_shape([orig, (orig[0] + 1, orig[1])], imgsz, stride=32) == imgsz  # mixed batch: square


@pytest.mark.parametrize("orig", [(480, 640), (1080, 1920), (333, 101), (640, 640)])
def test_rect_boxes_map_back_exactly(orig):
    out = letterbox_shape([orig], (640, 640), stride=32)
    p = letterbox_params(orig, out)
    h, w = orig
    box = torch.tensor([[0.1 * w, 0.2 * h, 0.7 * w, 0.9 * h]], dtype=torch.float64)
    fwd = box * p.ratio + torch.tensor([p.pad[0], p.pad[1], p.pad[0], p.pad[1]], dtype=torch.float64)
    assert (fwd[:, [0, 2]] <= out[1]).all() and (fwd[:, [1, 3]] <= out[0]).all()
    back = scale_boxes(fwd, ratio=p.ratio, pad=p.pad, orig_shape=orig)
    torch.testing.assert_close(back, box, rtol=0, atol=1e-9)


def test_letterbox_batch_matches_per_image_letterbox():
    from libreyolo.ops.letterbox import letterbox

    gen = torch.Generator().manual_seed(0)
    imgs = torch.randint(0, 256, (2, 3, 90, 120), dtype=torch.uint8, generator=gen)
    x, p = letterbox_batch(imgs, (96, 160))
    for i in range(2):
        ref, rp = letterbox(imgs[i], (96, 160))
        assert rp == p
        assert torch.equal(x[i].to(torch.uint8), ref)
    same, _ = letterbox_batch(imgs, (90, 120))
    assert same is imgs  # nothing to do: no copy


# --------------------------------------------------------------------------- the prepared twin
def _model(cls=YOLO9, size="t", nc=4):
    torch.manual_seed(0)
    m = Model(cls(size=size, nc=nc, imgsz=128))
    randomise_norm_stats(m.net, seed=0)
    return m


def test_prepared_twin_is_fused_cached_and_leaves_the_model_trainable():
    m = _model()
    twin = m.prepared()
    assert twin is not m and twin.fused and not m.fused
    assert twin is m.prepared()  # idempotent: built once
    assert any(isinstance(mod, torch.nn.BatchNorm2d) for mod in m.net.modules())  # original untouched
    assert not any(isinstance(mod, torch.nn.BatchNorm2d) for mod in twin.net.modules())
    x = torch.rand(1, 3, 128, 128)
    with torch.inference_mode():
        a, b = m.net(x), twin.net(x)
    for u, v in zip(a, b, strict=True):
        torch.testing.assert_close(u, v, rtol=1e-4, atol=1e-4)
    assert m.prepared(fuse=False) is m.backend  # nothing to prepare: the model's own backend


def test_prepared_twin_is_rebuilt_when_weights_change_in_place():
    m = _model()
    twin = m.prepared()
    with torch.no_grad():
        next(m.net.parameters()).add_(1.0)  # an optimizer step, as training does
    fresh = m.prepared()
    assert fresh is not twin
    m.load_weights(m.net.state_dict())
    assert m.prepared() is not fresh


def test_alternating_fp32_and_half_keeps_both_twins_until_the_weights_change():
    """predict(half=False) and predict(half=True) in turn reuse their twins (no re-fuse, re-cast
    or re-capture per call); a third spec evicts the least recently used one; a weight change
    makes every cached twin stale."""
    m = _model()
    fp32, half = m.prepared(), m.prepared(half=True)
    assert fp32 is not half
    assert m.prepared() is fp32 and m.prepared(half=True) is half  # both kept
    unfused_half = m.prepared(half=True, fuse=False)  # a third spec: fp32 (least recent) evicted
    assert m.prepared(half=True) is half and m.prepared(half=True, fuse=False) is unfused_half
    assert m.prepared() is not fp32
    with torch.no_grad():
        next(m.net.parameters()).add_(1.0)
    assert m.prepared(half=True) is not half


def test_half_twin_is_cast_once_and_keeps_fp32_master():
    m = _model()
    twin = m.prepared(half=True)
    dtypes = {p.dtype for p in twin.net.parameters()}
    assert dtypes == {torch.bfloat16}  # CPU: bfloat16
    assert {p.dtype for p in m.net.parameters()} == {torch.float32}
    res = m.predict(np.full((96, 128, 3), 127, np.uint8), half=True)
    assert res[0].boxes.data.dtype == torch.float32
    assert m.graph_info()["prepared"] == {"fused": True, "dtype": "bfloat16", "channels_last": False,
                                          "decode_in_graph": True}


def test_training_after_predict_sees_the_unfused_model(tmp_path):
    m = _model()
    m.predict(np.zeros((64, 64, 3), np.uint8))
    assert not m.fused  # predict fused a copy, so train() does not refuse the model


# --------------------------------------------------------------------------- captured decode
@pytest.mark.parametrize(("cls", "size"), [(YOLO9, "t"), (YOLOX, "nano")])
def test_decode_then_select_equals_the_eager_postprocess(cls, size):
    m = _model(cls, size)
    gen = torch.Generator().manual_seed(1)
    x = torch.rand(2, 3, 128, 160, generator=gen)
    with torch.no_grad():
        raw = list(m.net(x))
    for r in raw:  # lift some class logits so that tens of candidates pass conf=0.25
        r[:, -m.nc:] += 10.0 * torch.rand(r[:, -m.nc:].shape, generator=gen)
        if cls is YOLOX:
            r[:, 4] += 8.0
    ref = m.postprocess(raw, conf=0.25, iou=0.6, classes=None, max_det=50, agnostic=False)
    with torch.inference_mode():
        cands = m.decode(raw)
    assert cands.shape == (2, min(m.DECODE_TOPK, sum(r.shape[2] * r.shape[3] for r in raw)), 6)
    assert (cands[:, 1:, 4] <= cands[:, :-1, 4]).all()  # sorted by score
    got = select_detections(cands, conf=0.25, iou=0.6, max_det=50, agnostic=False)
    assert sum(len(r) for r in ref) > 10
    for a, b in zip(ref, got, strict=True):
        assert a.shape == b.shape
        torch.testing.assert_close(b, a.float(), rtol=1e-5, atol=1e-4)


def test_predict_uses_the_decode_and_matches_the_postprocess_path():
    m = _model()
    with torch.no_grad():  # make the untrained head fire on some anchors
        for conv in m.net.head.cls:
            conv[-1].bias.add_(6.0)
    img = np.random.default_rng(0).integers(0, 255, (100, 140, 3), dtype=np.uint8)
    fast = m.predict(img, conf=0.3, max_det=40)[0]
    slow = m.predict(img, conf=0.3, max_det=40, classes=list(range(m.nc)))[0]  # classes -> eager postprocess
    assert len(fast) > 0 and fast.boxes.data.shape == slow.boxes.data.shape
    torch.testing.assert_close(fast.boxes.data, slow.boxes.data, rtol=1e-5, atol=1e-3)


def test_speed_parts_add_up_and_include_results():
    m = _model()
    r = m.predict(np.zeros((64, 96, 3), np.uint8))[0]
    assert set(r.speed) == {"preprocess", "inference", "postprocess", "results"}
    assert all(v >= 0 for v in r.speed.values()) and r.speed["inference"] > 0


def test_rtmdet_decode_then_select_equals_the_eager_postprocess():
    from libreyolo.models.rtmdet.family import RTMDet

    m = _model(RTMDet, "t")
    gen = torch.Generator().manual_seed(2)
    with torch.no_grad():
        raw = list(m.net(torch.rand(1, 3, 128, 128, generator=gen)))
    for r in raw:
        r[:, 4:] += 8.0 * torch.rand(r[:, 4:].shape, generator=gen)
    ref = m.postprocess(raw, conf=0.3, iou=0.6, classes=None, max_det=40, agnostic=False)
    with torch.inference_mode():
        got = select_detections(m.decode(raw), conf=0.3, iou=0.6, max_det=40, agnostic=False)
    assert len(ref[0]) > 10 and ref[0].shape == got[0].shape
    torch.testing.assert_close(got[0], ref[0].float(), rtol=1e-5, atol=1e-4)


def test_detr_decode_then_threshold_equals_the_eager_postprocess():
    from libreyolo.models.rtdetr.family import RTDETR

    torch.manual_seed(0)
    m = Model(RTDETR(size="r18", nc=5))
    gen = torch.Generator().manual_seed(3)
    logits = 4.0 * torch.randn(2, 300, 5, generator=gen)
    boxes = 100 * torch.rand(2, 300, 4, generator=gen)
    ref = m.postprocess((logits, boxes), conf=0.4, iou=0.7, classes=None, max_det=100, agnostic=False)
    got = select_detections(m.decode((logits, boxes)), conf=0.4, iou=0.7, max_det=100, agnostic=False, nms=False)
    for a, b in zip(ref, got, strict=True):
        assert len(a) > 10
        assert torch.equal(a, b)


def test_a_conf_so_low_that_topk_would_cut_falls_back_to_the_eager_postprocess():
    m = _model()
    with torch.no_grad():  # every anchor far above conf: 2100 anchors at 320x320 > DECODE_TOPK
        for conv in m.net.head.cls:
            conv[-1].bias.add_(8.0)
    img = np.random.default_rng(1).integers(0, 255, (320, 320, 3), dtype=np.uint8)
    raw = m.prepared().eager_forward(torch.rand(1, 3, 320, 320), decoded=True)
    assert raw.shape[1] == m.DECODE_TOPK and float(raw[0, -1, 4]) > 0.001  # the top-k is full: truncation
    got = m.predict(img, imgsz=320, conf=0.001, max_det=300)[0]
    ref = m.predict(img, imgsz=320, conf=0.001, max_det=300, classes=list(range(m.nc)))[0]  # eager postprocess
    assert len(got) > 0 and got.boxes.data.shape == ref.boxes.data.shape
    torch.testing.assert_close(got.boxes.data, ref.boxes.data, rtol=1e-5, atol=1e-3)


def test_select_drops_nan_scores_and_keeps_the_valid_rows():
    c = torch.tensor([[[0, 0, 10, 10, float("nan"), 0], [0, 0, 10, 10, 0.9, 1], [20, 20, 30, 30, 0.8, 1],
                       [0, 0, 1, 1, 0.1, 0]]])
    (d,) = select_detections(c, conf=0.5, iou=0.5, max_det=10, agnostic=False)
    assert d[:, 4].tolist() == pytest.approx([0.9, 0.8])


def test_cudnn_benchmark_flag_is_restored_after_nested_and_concurrent_calls():
    from libreyolo.models._base.inference import _BENCHMARK

    before = torch.backends.cudnn.benchmark
    with _BENCHMARK:
        with _BENCHMARK:
            assert torch.backends.cudnn.benchmark is True
        assert torch.backends.cudnn.benchmark is True  # the outer call still runs
    assert torch.backends.cudnn.benchmark == before


def test_staging_buffers_are_keyed_by_device_and_size():
    from libreyolo.tasks.detect.preprocess import Staging

    st = Staging()
    a = np.arange(12, dtype=np.uint8).reshape(2, 2, 3)
    out = st.upload(a, torch.device("cpu"))
    assert torch.equal(out, torch.from_numpy(a)) and not st._bufs  # CPU: no pinned staging


def test_predict_rounds_imgsz_like_train_with_one_notice(caplog):
    import logging

    m = _model()
    with caplog.at_level(logging.WARNING, logger="libreyolo.engine.predictor"):
        m.predict(np.zeros((40, 40, 3), np.uint8), imgsz=33)
    assert any("imgsz=33 is not a multiple" in r.getMessage() and "[64, 64]" in r.getMessage()
               for r in caplog.records)
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="libreyolo.engine.predictor"):
        m.predict(np.zeros((40, 40, 3), np.uint8), imgsz=64)
    assert not [r for r in caplog.records if "not a multiple" in r.getMessage()]


def test_prepared_twin_follows_the_family_flags_it_is_built_from(monkeypatch):
    """The spec of a twin is looked up per (half, fuse, fused, device, HALF_CAST,
    INFER_CHANNELS_LAST): a flag changed between calls (as the layout benchmarks do) gets its
    own twin instead of the one cached for the old value."""
    m = _model()
    assert next(m.prepared(half=True).net.parameters()).dtype == torch.bfloat16  # CPU half: bf16
    monkeypatch.setattr(type(m.family), "HALF_CAST", False)
    assert next(m.prepared(half=True).net.parameters()).dtype == torch.float32
    monkeypatch.undo()
    assert next(m.prepared(half=True).net.parameters()).dtype == torch.bfloat16


def test_the_half_twin_can_take_its_own_layout_and_the_epilogue_follows_it():
    """``HALF_CHANNELS_LAST`` picks the half-precision twin's layout (None: the fp32 one's), and
    ``GRAPH_BIAS_ACT = "channels_last"`` turns the fused epilogue on for channels-last twins only."""
    from types import SimpleNamespace

    from libreyolo.models._base.inference import PrepSpec, twin_channels_last, uses_graph_bias_act
    from libreyolo.models.rtmdet.family import RTMDet
    from libreyolo.models.yolo9.family import YOLO9
    from libreyolo.models.yolox.family import YOLOX

    for cls in (YOLOX, RTMDet):  # NCHW in fp32, channels-last in half precision
        assert twin_channels_last(cls, torch.float32) is False
        assert twin_channels_last(cls, torch.float16) is True and twin_channels_last(cls, torch.bfloat16) is True
    assert twin_channels_last(YOLO9, torch.float32) is twin_channels_last(YOLO9, torch.float16) is True

    def twin(flag: object, cl: bool) -> SimpleNamespace:
        return SimpleNamespace(GRAPH_BIAS_ACT=flag, prep_spec=PrepSpec(fuse=True, dtype=torch.float16,
                                                                       channels_last=cl, device="cuda:0"))

    assert uses_graph_bias_act(twin("channels_last", True)) is True
    assert uses_graph_bias_act(twin("channels_last", False)) is False
    assert uses_graph_bias_act(twin(True, False)) is True and uses_graph_bias_act(twin(False, True)) is False
