"""The predictor's host-side fast paths give exactly what the general paths give."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from libreyolo.engine.sources import load_source
from libreyolo.ops.boxes import scale_boxes
from libreyolo.ops.candidates import candidates_truncated, select_detections
from libreyolo.tasks.detect.preprocess import preprocess


def test_scale_boxes_numpy_path_is_bitwise_the_torch_formula():
    g = torch.Generator().manual_seed(0)
    boxes = torch.rand(500, 4, generator=g) * 700 - 30  # some outside the image: clipped
    for ratio, pad, shape in [(0.6666667, (0.0, 80.0), (480, 640)), (1.0, (3.5, 0.0), (333, 517)),
                              (0.31, (12.0, 7.0), (1080, 1920))]:
        got = scale_boxes(boxes, ratio=ratio, pad=pad, orig_shape=shape)  # the numpy fast path
        # a tensor that requires grad takes the general (indexed torch) path
        want = scale_boxes(boxes.clone().requires_grad_(True), ratio=ratio, pad=pad, orig_shape=shape).detach()
        assert got.dtype == torch.float32 and torch.equal(got, want)
    assert torch.equal(boxes, boxes.clone())  # input untouched (no in-place edit)


def test_select_detections_numpy_threshold_matches_a_torch_reference():
    g = torch.Generator().manual_seed(1)
    b, k = 3, 50
    xy = torch.rand(b, k, 2, generator=g) * 300
    wh = torch.rand(b, k, 2, generator=g) * 80 + 1
    scores = torch.rand(b, k, generator=g).sort(dim=1, descending=True).values
    scores[1, 0] = float("nan")  # NaN ranks first after topk: it must drop out
    cands = torch.cat([xy, xy + wh, scores[..., None], torch.randint(0, 3, (b, k, 1), generator=g).float()], -1)
    got = select_detections(cands, conf=0.4, iou=0.5, max_det=7, agnostic=False)
    from torchvision.ops import batched_nms

    for i in range(b):
        c = cands[i][cands[i][:, 4] > 0.4]
        keep = batched_nms(c[:, :4], c[:, 4], c[:, 5].long(), 0.5)[:7]
        assert torch.equal(got[i], c[keep]), i
    assert not candidates_truncated(cands, 0.4, k=k + 1)  # fewer anchors than k
    assert candidates_truncated(cands, 0.0, k=k) and not candidates_truncated(cands, 0.999, k=k)


def test_bgr_sources_stay_bgr_until_rgb_is_needed():
    bgr = np.zeros((4, 5, 3), np.uint8)
    bgr[..., 0] = 200  # blue in BGR order
    (item,) = next(iter(load_source(bgr, batch=1)))
    assert item.rgb is None and np.array_equal(item.orig, bgr)
    assert item.shape == (4, 5)
    assert item.image[0, 0].tolist() == [0, 0, 200] and item.rgb is not None  # made on first use


def test_preprocess_swaps_bgr_channels_on_the_device_exactly():
    rng = np.random.default_rng(0)
    rgb = [rng.integers(0, 256, (37, 53, 3), dtype=np.uint8) for _ in range(2)]
    bgr = [np.ascontiguousarray(im[:, :, ::-1]) for im in rgb]
    for images_rgb, images_bgr in ((rgb, bgr), (rgb[:1] + [rgb[1][:20]], bgr[:1] + [bgr[1][:20]])):  # same / mixed shapes
        want, p1 = preprocess(images_rgb, (64, 64), torch.device("cpu"))
        got, p2 = preprocess(images_bgr, (64, 64), torch.device("cpu"), bgr=True)
        assert torch.equal(got, want) and p1 == p2


def test_verbose_predict_logs_one_line_per_image(caplog):
    import logging

    from libreyolo import SAMPLE_IMAGE, LibreYOLO
    from libreyolo.errors import ConfigError

    model = LibreYOLO("LibreYOLO9t.pt")
    with caplog.at_level(logging.INFO, logger="libreyolo"):
        (r,) = model.predict(str(SAMPLE_IMAGE), verbose=True)
    lines = [m.getMessage() for m in caplog.records if m.name == "libreyolo.engine.predictor"]
    assert len(lines) == 1 and str(SAMPLE_IMAGE) in lines[0] and r.verbose() in lines[0] and "ms" in lines[0]
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="libreyolo"):
        model.predict(str(SAMPLE_IMAGE))  # quiet by default
    assert not [m for m in caplog.records if m.name == "libreyolo.engine.predictor"]
    with pytest.raises(ConfigError, match="verbose"):
        model.predict(str(SAMPLE_IMAGE), verbose="yes")


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("fmt", [torch.contiguous_format, torch.channels_last])
def test_one_kernel_normalise_is_the_cast_then_divide(dtype, fmt):
    from libreyolo.tasks.detect.preprocess import normalized

    g = torch.Generator().manual_seed(0)
    u8 = torch.randint(0, 256, (2, 37, 53, 3), dtype=torch.uint8, generator=g).permute(0, 3, 1, 2)
    every = torch.arange(256, dtype=torch.uint8).view(1, 1, 16, 16).expand(1, 3, 16, 16)
    resized = torch.rand(1, 3, 9, 11, generator=g).mul_(255).round_()  # the float input after a resize
    for x in (u8, every, resized):
        want = x.clone().to(dtype, memory_format=fmt).div_(255.0)  # clone: .to() may return x itself
        got = normalized(x, dtype=dtype, memory_format=fmt)
        assert got.dtype == dtype and got.is_contiguous(memory_format=fmt)
        assert torch.equal(got, want)
