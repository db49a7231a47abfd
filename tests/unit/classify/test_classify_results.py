"""Results.probs, top-1/top-5 accuracy, prediction on SAMPLE_IMAGE."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from libreyolo import SAMPLE_IMAGE, LibreYOLO
from libreyolo.engine.results import Probs, Results
from libreyolo.errors import ConfigError
from libreyolo.tasks.classify.scoring import accuracy, topk_correct


def test_probs_api():
    p = Probs(torch.tensor([0.05, 0.4, 0.1, 0.3, 0.02, 0.13]))
    assert p.top1 == 1 and p.top5 == [1, 3, 5, 2, 0]
    assert float(p.top1conf) == pytest.approx(0.4)
    assert torch.allclose(p.top5conf, torch.tensor([0.4, 0.3, 0.13, 0.1, 0.05]))
    n = p.numpy()
    assert isinstance(n.data, np.ndarray) and isinstance(n.top5conf, np.ndarray) and n.top1 == 1
    assert Probs(torch.tensor([0.7, 0.3])).top5 == [0, 1]  # fewer than five classes
    with pytest.raises(ConfigError, match="1-D"):
        Probs(torch.zeros(2, 3))


def test_results_with_probs_text_json_and_plot():
    img = np.full((60, 80, 3), 127, np.uint8)
    names = {0: "circle", 1: "square", 2: "star"}
    r = Results(orig_img=img, names=names, probs=torch.tensor([0.2, 0.7, 0.1]))
    assert r.boxes is None and r.probs.top1 == 1
    assert r.verbose() == "square 0.70, circle 0.20, star 0.10"
    doc = json.loads(r.to_json())
    assert [d["name"] for d in doc] == ["square", "circle", "star"] and doc[0]["confidence"] == pytest.approx(0.7)
    drawn = r.plot()
    assert drawn.shape == img.shape and (drawn != img).any() and (r.orig_img == 127).all()
    assert "top5" in repr(r)


def test_topk_accuracy_on_hand_made_cases():
    probs = torch.tensor([
        [0.9, 0.05, 0.02, 0.01, 0.01, 0.01],  # target 0: top1 hit
        [0.1, 0.5, 0.2, 0.1, 0.05, 0.05],  # target 2: second -> top5 hit only
        [0.3, 0.25, 0.2, 0.15, 0.07, 0.03],  # target 5: last -> miss
        [0.01, 0.01, 0.01, 0.01, 0.9, 0.06],  # target 4: hit
    ])
    target = torch.tensor([0, 2, 5, 4])
    t1, t5 = topk_correct(probs, target)
    assert t1.tolist() == [True, False, False, True] and t5.tolist() == [True, True, False, True]
    assert accuracy(probs, target) == {"top1": 0.5, "top5": 0.75}
    assert accuracy(probs[:, :3], torch.tensor([2, 2, 2, 2]))["top5"] == 1.0  # nc < 5


@pytest.mark.parametrize("name", ["LibreMobileNetV4conv_small-cls.pt", "LibreResNet18-cls.pt"])
def test_predict_on_sample_image_returns_probs(name: str, tmp_path):
    torch.manual_seed(0)
    model = LibreYOLO(name, pretrained=False, names=["a", "b", "c", "d", "e", "f", "g"])
    assert model.task == "classify"
    results = model(SAMPLE_IMAGE, imgsz=64, save=True, save_dir=tmp_path)
    r = results[0]
    assert r.boxes is None and r.probs is not None and r.probs.data.shape == (7,)
    assert float(r.probs.data.sum()) == pytest.approx(1.0, abs=1e-5)
    assert r.orig_shape == (480, 640) and r.save_path is not None and r.save_path.is_file()
    assert len(r.probs.top5) == 5 and r.names[r.probs.top1] in "abcdefg"
