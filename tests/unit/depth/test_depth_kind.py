"""What a depth result's map is (``Results.depth_kind``), carried from the family through the depth
task: Depth Anything V2 ``"disparity"``, Depth Anything 3 ``"depth"`` (metric_l ``"metric"``);
``plot()`` colours near = warm for both, ``summary()`` / ``to_json()`` name the kind, and
:func:`~libreyolo.models.depth_anything3.metric.to_metres` gives DA3Metric metres."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from libreyolo import LibreYOLO
from libreyolo.engine.depth_io import colorize
from libreyolo.engine.results import Results
from libreyolo.errors import ConfigError
from libreyolo.models.depth_anything3.family import DepthAnything3
from libreyolo.models.depth_anything3.metric import to_metres

IMG = np.random.default_rng(0).integers(0, 255, (40, 56, 3), dtype=np.uint8)


@pytest.fixture(scope="module")
def v2():
    torch.manual_seed(0)
    return LibreYOLO("LibreDepthAnythingV2s-depth.pt", pretrained=False)


@pytest.fixture(scope="module")
def da3():
    torch.manual_seed(0)
    return LibreYOLO("LibreDepthAnything3s-depth.pt", pretrained=False)


WARM, COOL = colorize(np.array([[1.0, 0.0]]))[0]  # TURBO's ends: the largest disparity (near) and the smallest


def test_each_family_stamps_its_kind_and_plot_is_near_warm(v2, da3) -> None:
    (rv,) = v2.predict(IMG, imgsz=28)
    (rd,) = da3.predict(IMG, imgsz=28)
    assert (v2.depth_kind, rv.depth_kind, da3.depth_kind, rd.depth_kind) == ("disparity", "disparity", "depth", "depth")
    assert json.loads(rv.to_json())[0]["kind"] == "disparity" and rd.summary()[0]["kind"] == "depth"
    assert np.array_equal(rv.plot(), colorize(rv.depth.numpy()))
    assert np.array_equal(rd.plot(), colorize(rd.depth.numpy(), near_is_large=False))
    # the nearest pixel is warm in both pictures: the largest disparity, the smallest depth
    for r, near, far in ((rv, rv.depth.argmax(), rv.depth.argmin()), (rd, rd.depth.argmin(), rd.depth.argmax())):
        img = r.plot().reshape(-1, 3)
        assert np.array_equal(img[near], WARM) and np.array_equal(img[far], COOL), r.depth_kind
    assert rd.cpu().depth_kind == rd.numpy().depth_kind == "depth"  # copies keep the kind


def test_hand_built_results_plot_near_warm_for_every_kind() -> None:
    ramp = torch.linspace(1.0, 5.0, 24).view(4, 6)  # grows to the right
    disp = Results(orig_img=np.zeros((4, 6, 3), np.uint8), names={0: "depth"}, depth=ramp)
    depth = Results(orig_img=np.zeros((4, 6, 3), np.uint8), names={0: "depth"}, depth=ramp, depth_kind="depth")
    assert disp.depth_kind is None and disp.summary()[0]["kind"] == "disparity"  # the default: as before
    assert np.array_equal(disp.plot()[-1, -1], WARM) and np.array_equal(disp.plot()[0, 0], COOL)  # large = near
    for kind in ("depth", "metric", "metres"):  # small = near
        r = depth.update() if kind == "depth" else depth._with(depth_kind=kind)
        assert np.array_equal(r.plot()[0, 0], WARM) and np.array_equal(r.plot()[-1, -1], COOL), kind
        assert r.summary()[0]["kind"] == kind
    with pytest.raises(ConfigError, match="depth_kind must be one of"):
        Results(orig_img=np.zeros((4, 6, 3), np.uint8), names={0: "depth"}, depth=ramp, depth_kind="inverse")


def test_to_metres_on_a_metric_result_and_refused_elsewhere(v2, da3, monkeypatch) -> None:
    (rd,) = da3.predict(IMG, imgsz=28)
    with pytest.raises(ConfigError, match="needs a metric depth result.*depth_kind 'depth'"):
        to_metres(rd, 500.0)
    (rv,) = v2.predict(IMG, imgsz=28)
    with pytest.raises(ConfigError, match="depth_kind 'disparity'"):
        to_metres(rv, 500.0)
    with pytest.raises(ConfigError, match="no depth map"):
        to_metres(Results(orig_img=IMG, names={0: "a"}), 500.0)
    # metric_l (334 M parameters) is not built on a CPU test: the s network standing in for it
    monkeypatch.setattr(DepthAnything3, "METRIC_SIZES", ("s",))
    (rm,) = da3.predict(IMG, imgsz=28)
    assert rm.depth_kind == "metric" and rm.summary()[0]["kind"] == "metric"
    # the metric value is for the original image's focal length: the network's times the letterbox
    # ratio (56 x 40 fed at 28 px: 0.5), so that metres = focal_px(original) * value / 300
    torch.testing.assert_close(rm.depth, rd.depth * 0.5)
    m = to_metres(rm, focal_px=450.0)
    assert m.depth_kind == "metres" and m.summary()[0]["kind"] == "metres" and m.verbose().startswith("metres ")
    torch.testing.assert_close(m.depth, rm.depth * 1.5)
    assert rm.depth_kind == "metric" and m.orig_shape == rm.orig_shape  # the input is unchanged
    assert np.array_equal(m.plot(), colorize(m.depth.numpy(), near_is_large=False))
    for bad in (0.0, -3.0, float("nan"), "wide"):
        with pytest.raises(ConfigError, match="focal_px"):
            to_metres(rm, bad)
