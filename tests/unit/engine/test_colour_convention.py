"""The colour convention end to end: numpy arrays are BGR (OpenCV order), PIL images and tensors
RGB, the network is always fed RGB, and ``orig_img`` / ``plot()`` are BGR.

A tiny stand-in family makes the class depend on the channel order: it answers "red" when the
red channel of the tensor it is fed is brighter than the blue one, so feeding it swapped
channels flips the class.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar

import cv2
import numpy as np
import pytest
import torch
from PIL import Image
from torch import nn

from libreyolo.engine.sources import load_source
from libreyolo.model import Model
from libreyolo.models._base.family import Family

RED_BGR = (0, 0, 230)  # OpenCV order
RED_RGB = (230, 0, 0)


class _ChannelMeans(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.mean(dim=(2, 3))  # (B, 3): mean R, G, B of what the network is fed


class ChannelFamily(Family):
    FAMILY: ClassVar[str] = "channel_probe"
    NAME_TOKEN: ClassVar[str] = "PROBE"
    SIZES: ClassVar[tuple[str, ...]] = ("n",)
    DEFAULT_IMGSZ: ClassVar[int] = 64

    @classmethod
    def build_net(cls, *, size: str, nc: int, task: str) -> nn.Module:
        return _ChannelMeans()

    def postprocess(self, raw: Any, **kw: Any) -> list[torch.Tensor]:
        out = []
        for means in raw:
            cls = 0.0 if float(means[0]) > float(means[2]) else 1.0
            out.append(torch.tensor([[4.0, 4.0, 60.0, 60.0, 0.9, cls]]))
        return out


@pytest.fixture
def probe() -> ChannelFamily:
    return Model(ChannelFamily(size="n", nc=2, names=["red", "blue"]))


def _red_bgr() -> np.ndarray:
    return np.ascontiguousarray(np.broadcast_to(np.array(RED_BGR, np.uint8), (64, 64, 3)))


def test_the_network_is_fed_rgb_whatever_the_source(tmp_path: Path) -> None:
    """Preprocessing level: every way in gives the same RGB pixels, and orig stays BGR."""
    bgr = _red_bgr()
    png = tmp_path / "red.png"
    assert cv2.imwrite(str(png), bgr)
    sources = [bgr, str(png), Image.fromarray(bgr[:, :, ::-1].copy()),
               torch.from_numpy(bgr[:, :, ::-1].copy()).permute(2, 0, 1)]
    for chunk in load_source(sources, batch=4):
        for it in chunk:
            assert tuple(it.image[0, 0]) == RED_RGB and tuple(it.orig[0, 0]) == RED_BGR


def test_files_pil_and_explicit_numpy_orders_detect_red(probe: ChannelFamily, tmp_path: Path) -> None:
    bgr = _red_bgr()
    png = tmp_path / "red.png"
    assert cv2.imwrite(str(png), bgr)
    rgb = bgr[:, :, ::-1].copy()
    for source, kw in ((str(png), {}), (Image.fromarray(rgb), {}), (bgr, {"bgr": True}), (rgb, {"bgr": False})):
        (r,) = probe.predict(source, **kw)
        assert r.verbose() == "1 red", (type(source).__name__, kw)


def test_a_cv2_frame_is_bgr_by_default_and_plot_is_bgr(probe: ChannelFamily, tmp_path: Path) -> None:
    bgr = _red_bgr()
    (r,) = probe.predict(bgr)
    assert r.verbose() == "1 red"  # not "1 blue": the frame was read in OpenCV order
    np.testing.assert_array_equal(r.orig_img, bgr)
    assert cv2.imwrite(str(tmp_path / "out.png"), r.plot(labels=False))
    assert tuple(np.asarray(Image.open(tmp_path / "out.png").convert("RGB"))[32, 32]) == RED_RGB
