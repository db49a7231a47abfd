"""GPU test of multi-scale training under capture (issue 21 item 3, beyond SPEC T-3): with
``multi_scale`` the batches come in a few fixed sizes, and each size is captured once and replayed."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

pytestmark = pytest.mark.cuda


def test_multi_scale_captures_one_graph_per_bucket_and_replays_it(tmp_path: Path) -> None:
    from libreyolo import LibreYOLO
    from libreyolo.data.shapes import ensure_shapes_dataset
    from libreyolo.graphs.training import REPEATS_BEFORE_CAPTURE
    from libreyolo.training.scales import MultiScale

    batch, imgsz, f, epochs, n_train = 8, 160, 0.25, 2, 96
    data = ensure_shapes_dataset(tmp_path / "ds", n_train=n_train, n_val=8, imgsz=imgsz, seed=3)
    nb = n_train // batch  # no partial last batch
    ms = MultiScale(imgsz=imgsz, fraction=f, seed=0)
    picks = Counter(ms.size(epoch=e, i=i) for e in range(epochs) for i in range(nb))
    assert len(ms.buckets) == 3 and all(picks[s] > REPEATS_BEFORE_CAPTURE for s in ms.buckets), picks  # precondition

    model = LibreYOLO("LibreYOLO9t.pt", pretrained=False)  # random weights: nothing to download
    out = model.train(data=str(data), epochs=epochs, batch=batch, imgsz=imgsz, workers=2, device="0", amp=True,
                      cuda_graph=True, multi_scale=f, seed=0, project=str(tmp_path / "runs"), plots=False,
                      tensorboard=False, close_mosaic=0, val=False)
    info = out["cuda_graph"]
    assert info["enabled"] and info["failed"] is None, info
    graphs = {tuple(g["shape"]): g for g in info["graphs"]}
    assert len(graphs) == len(ms.buckets), info  # one graph per bucket, nothing else
    for s in ms.buckets:
        g = graphs[(batch, 3, s, s)]
        # eager until the size was seen REPEATS_BEFORE_CAPTURE times; that step and every later one replay
        assert g["replays"] == picks[s] - REPEATS_BEFORE_CAPTURE + 1, (s, g, picks)
    assert info["eager_steps"] == len(ms.buckets) * (REPEATS_BEFORE_CAPTURE - 1), info
    assert (Path(out["save_dir"]) / "results.csv").is_file()
