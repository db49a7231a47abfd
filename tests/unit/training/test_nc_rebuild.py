"""Training on a dataset with another class count rebuilds the head on the model's *own* network:
a custom (narrow) network keeps its configuration, only the class count changes, one warning."""

from __future__ import annotations

import logging
from types import SimpleNamespace

import pytest
import torch
from torch import nn

from libreyolo.errors import ConfigError
from libreyolo.models._detr.net import DETRNetConfig, EncoderDecoderDetector
from libreyolo.models.rtdetr.family import RTDETR
from libreyolo.models.yolo9.family import YOLO9
from libreyolo.training.config import TrainConfig
from libreyolo.training.data_setup import DataSetup

TINY = DETRNetConfig(depth=18, expansion=0.5, dec_layers=2, hidden=32, enc_ffn=64, dec_ffn=64, num_heads=4,
                     num_queries=20, num_denoising=12, backbone_width=8)
NAMES = {i: f"c{i}" for i in range(6)}


def _match(fam) -> None:
    setup = DataSetup(fam, TrainConfig.from_overrides({"data": "shapes", "imgsz": 64}), device=torch.device("cpu"),
                      dist=None)
    setup.config = SimpleNamespace(nc=6, names=NAMES)
    setup.match_classes()


def _shapes(net: nn.Module) -> dict[str, tuple[int, ...]]:
    return {k: tuple(v.shape) for k, v in net.state_dict().items()}


def test_a_custom_tiny_network_keeps_its_configuration(caplog) -> None:
    torch.manual_seed(0)
    fam = RTDETR(size="r18", nc=3)
    fam.net = EncoderDecoderDetector(cfg=TINY, nc=3)
    backbone = {k: v.clone() for k, v in fam.net.state_dict().items() if k.startswith("backbone.")}
    with caplog.at_level(logging.WARNING):
        _match(fam)
    assert isinstance(fam.net, EncoderDecoderDetector) and fam.net.cfg == TINY and fam.net.nc == 6 and fam.nc == 6
    assert _shapes(fam.net) == _shapes(EncoderDecoderDetector(cfg=TINY, nc=6))  # not the full-size r18
    assert all(torch.equal(fam.net.state_dict()[k], v) for k, v in backbone.items())  # matching weights kept
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and "6 classes" in warnings[0].getMessage(), [r.getMessage() for r in warnings]


def test_the_built_in_network_is_rebuilt_as_before(caplog) -> None:
    fam = YOLO9(size="t", nc=3)
    with caplog.at_level(logging.WARNING):
        _match(fam)
    assert _shapes(fam.net) == _shapes(YOLO9.build_net(size="t", nc=6, task="detect")) and fam.nc == 6
    assert len([r for r in caplog.records if r.levelno == logging.WARNING]) == 1


class _Opaque(nn.Module):
    def __init__(self, width: int, nc: int) -> None:  # keeps neither argument: cannot be rebuilt
        super().__init__()
        self.head = nn.Conv2d(3, width + nc, 1)


def test_a_custom_network_that_cannot_be_rebuilt_is_refused() -> None:
    fam = YOLO9(size="t", nc=3)
    fam.net = _Opaque(4, 3)
    with pytest.raises(ConfigError, match="_Opaque"):
        _match(fam)


def test_model_train_keeps_the_custom_network(tiny_shapes, tmp_path, monkeypatch) -> None:
    from libreyolo.kernels import registry as kernels
    from libreyolo.model import Model

    monkeypatch.setenv("LIBREYOLO_KERNELS", "off")  # portable MSDA (no Triton interpreter: slow)
    kernels.clear_cache()
    torch.manual_seed(0)
    fam = RTDETR(size="r18", nc=3)
    fam.net = EncoderDecoderDetector(cfg=TINY, nc=3)
    model = Model(fam)
    model.train(data=str(tiny_shapes), epochs=1, imgsz=64, batch=4, workers=0, device="cpu", nbs=4, mosaic=0.0,
                close_mosaic=0, warmup_epochs=0, val=False, verbose=False, tensorboard=False, plots=False,
                project=str(tmp_path), seed=0)
    assert model.nc == 6 and isinstance(model.net, EncoderDecoderDetector) and model.net.cfg == TINY
    kernels.clear_cache()
