"""rect=True and multi_scale=f (issue 21 item 3): buckets, seeded picks, device resize, the trainer
end to end on CPU, the capture cap, and the default path left bit-identical."""

from __future__ import annotations

import csv
import logging
import random
from pathlib import Path

import numpy as np
import pytest
import torch

from libreyolo.data.batching import RectBatchSampler
from libreyolo.data.loader import EpochSampler
from libreyolo.errors import ConfigError
from libreyolo.model import Model
from libreyolo.models.yolo9.family import YOLO9
from libreyolo.training.config import TrainConfig
from libreyolo.training.scales import MAX_BUCKETS, MultiScale, graph_cap, scale_buckets
from libreyolo.training.trainer import Trainer


def tiny_overrides(data, project, **kw):
    base = dict(data=str(data), imgsz=64, batch=4, workers=0, device="cpu", nbs=4, mosaic=0.0, close_mosaic=0,
                warmup_epochs=0, optimizer="AdamW", lr0=0.002, verbose=False, tensorboard=False, plots=False,
                project=str(project), seed=0)
    base.update(kw)
    return base


def _rows(run: Path) -> list[dict[str, str]]:
    with open(run / "results.csv", newline="") as f:
        return list(csv.DictReader(f))


def _rng_state() -> tuple:
    return (torch.get_rng_state().clone(), np.random.get_state(), random.getstate())


def _set_rng(state: tuple) -> None:
    torch.set_rng_state(state[0])
    np.random.set_state(state[1])
    random.setstate(state[2])


def _same_rng(a: tuple, b: tuple) -> bool:
    na, nb = a[1], b[1]
    return (torch.equal(a[0], b[0]) and na[0] == nb[0] and np.array_equal(na[1], nb[1]) and na[2:] == nb[2:]
            and a[2] == b[2])


# ---------------------------------------------------------------- buckets and picks
@pytest.mark.parametrize(("imgsz", "f"), [(640, 0.5), (640, 0.25), (64, 0.5), (96, 0.5), (320, 0.1), (160, 0.5)])
def test_buckets_are_few_stride_multiples_in_range_with_imgsz(imgsz: int, f: float) -> None:
    b = scale_buckets(imgsz, f)
    assert imgsz in b and 1 <= len(b) <= MAX_BUCKETS and list(b) == sorted(set(b))
    assert all(s % 32 == 0 and max(32, imgsz * (1 - f)) - 32 < s <= imgsz * (1 + f) for s in b)
    assert scale_buckets(640, 0.5) == (320, 480, 640, 800, 960)
    assert scale_buckets(imgsz, 0.0) == (imgsz,)


def test_multi_scale_key_is_validated() -> None:
    assert TrainConfig.from_overrides({}).multi_scale == 0 and TrainConfig.from_overrides({}).rect is False
    assert TrainConfig.from_overrides({"multi_scale": "0.5"}).multi_scale == 0.5
    for bad in (1.0, -0.1, 2):
        with pytest.raises(ConfigError, match="multi_scale"):
            TrainConfig.from_overrides({"multi_scale": bad})


def test_picks_only_buckets_reproducibly_without_touching_global_rng() -> None:
    before = _rng_state()
    ms = MultiScale(imgsz=640, fraction=0.5, seed=7)
    picks = [ms.size(epoch=e, i=i) for e in range(3) for i in range(50)]
    assert _same_rng(before, _rng_state())
    assert set(picks) == set(ms.buckets)  # every bucket used, nothing else
    assert picks == [MultiScale(imgsz=640, fraction=0.5, seed=7).size(epoch=e, i=i) for e in range(3) for i in range(50)]
    assert picks != [MultiScale(imgsz=640, fraction=0.5, seed=8).size(epoch=e, i=i) for e in range(3) for i in range(50)]


def test_resize_on_device_square_and_rect() -> None:
    ms = MultiScale(imgsz=64, fraction=0.5, seed=0)
    x = torch.rand(2, 3, 64, 64)
    for i in range(12):
        s = ms.size(epoch=0, i=i)
        y = ms(x, epoch=0, i=i)
        assert tuple(y.shape) == (2, 3, s, s)
        if s == 64:
            assert y is x  # imgsz: no copy
    ms = MultiScale(imgsz=640, fraction=0.5, seed=0)
    assert ms.shape((384, 640), 320) == (192, 320) and ms.shape((384, 640), 960) == (576, 960)


def test_capture_cap_follows_the_buckets() -> None:
    from libreyolo.graphs.training import MAX_TRAIN_GRAPHS
    from libreyolo.training.capture import build_train_capture

    assert graph_cap(1, MAX_TRAIN_GRAPHS) == MAX_TRAIN_GRAPHS and graph_cap(5, 2) == 6
    model = YOLO9(size="t", nc=6)
    for sizes, cap in ((1, MAX_TRAIN_GRAPHS), (5, 6)):
        _, report = build_train_capture(model, net=model.net, device=torch.device("cpu"), amp_dtype=None,
                                        distributed=False, sizes=sizes)
        assert report.max_graphs == cap and not report.enabled  # CPU: refused, one line, as before


# ---------------------------------------------------------------- the default path is unchanged
def test_default_loader_and_rng_are_those_of_the_plain_path(tiny_shapes, tmp_path) -> None:
    """rect=False, multi_scale=0: the loader is built as before (same batches), no MultiScale exists,
    and an epoch over it leaves the global RNG where the reference loader leaves it."""
    from torch.utils.data import DataLoader

    from libreyolo.data.dataset import collate_detection

    t = Trainer(Model(YOLO9(size="t", nc=6)), TrainConfig.from_overrides(tiny_overrides(tiny_shapes, tmp_path, epochs=1,
                                                                                         mosaic=1.0)))
    t.setup()
    try:
        assert t.data.multi_scale is None and t.data.train_sampler is None
        assert isinstance(t.data.train_loader.sampler, EpochSampler)
        ds = t.data.train_ds
        ref = DataLoader(ds, batch_size=4, sampler=EpochSampler(ds, shuffle=True, seed=0), num_workers=0,
                         drop_last=False, collate_fn=collate_detection, generator=torch.Generator().manual_seed(0))
        ds.set_epoch(0)
        state = _rng_state()
        new = list(t.data.train_loader)
        after_new = _rng_state()
        ds.set_epoch(0)
        _set_rng(state)
        old = list(ref)
        assert _same_rng(after_new, _rng_state())
        assert len(new) == len(old) == 2
        for a, b in zip(new, old, strict=True):
            assert a["im_file"] == b["im_file"] and torch.equal(a["img"], b["img"])
            assert torch.equal(a["bboxes"], b["bboxes"]) and torch.equal(a["cls"], b["cls"])
    finally:
        t.teardown()


# ---------------------------------------------------------------- the trainer end to end
def test_trains_with_multi_scale_at_the_picked_sizes(tiny_shapes, tmp_path, monkeypatch, caplog) -> None:
    seen: list[tuple[int, int, int]] = []
    orig = Trainer._forward

    def spy(self, imgs):
        seen.append((self.epoch, int(imgs.shape[-2]), int(imgs.shape[-1])))
        return orig(self, imgs)

    monkeypatch.setattr(Trainer, "_forward", spy)
    with caplog.at_level(logging.INFO):
        out = Model(YOLO9(size="t", nc=6)).train(**tiny_overrides(tiny_shapes, tmp_path, epochs=2, multi_scale=0.5,
                                                                  cuda_graph=True))
    rows = _rows(Path(out["save_dir"]))
    assert [r["epoch"] for r in rows] == ["1", "2"]
    assert all(np.isfinite(float(r["train/box_loss"])) for r in rows)
    ms = MultiScale(imgsz=64, fraction=0.5, seed=0)
    assert ms.buckets == (32, 64, 96)
    assert [s[1] for s in seen] == [ms.size(epoch=e, i=i) for e in range(2) for i in range(2)]
    assert all(h == w for _, h, w in seen)
    info = out["cuda_graph"]  # CPU: refused cleanly, as without multi_scale
    assert info["enabled"] is False and "cpu" in info["reason"] and info["graphs"] == []
    assert sum("training eager" in r.message for r in caplog.records) == 1
    assert sum("multi_scale=0.5" in r.message for r in caplog.records) == 1


def test_trains_with_rect_and_logs_mosaic_off_once(tiny_shapes, tmp_path, caplog) -> None:
    with caplog.at_level(logging.INFO):
        t = Trainer(Model(YOLO9(size="t", nc=6)),
                    TrainConfig.from_overrides(tiny_overrides(tiny_shapes, tmp_path, epochs=2, rect=True, mosaic=1.0,
                                                              close_mosaic=1)))
        out = t.fit()
    assert [r["epoch"] for r in _rows(Path(out["save_dir"]))] == ["1", "2"]
    assert isinstance(t.data.train_sampler, RectBatchSampler) and t.data.train_ds.rect
    assert t.data.val_ds.rect and t.data.train_ds.batch_shapes is not None
    assert sum("rect=True: mosaic=1 off" in r.message for r in caplog.records) == 1
    assert not any("closing mosaic" in r.message or "mosaic off for the whole run" in r.message
                   for r in caplog.records)
    assert "mAP50-95" in out


def test_rect_and_multi_scale_together(tiny_shapes, tmp_path) -> None:
    out = Model(YOLO9(size="t", nc=6)).train(**tiny_overrides(tiny_shapes, tmp_path, epochs=1, rect=True,
                                                              multi_scale=0.5, val=False))
    assert [r["epoch"] for r in _rows(Path(out["save_dir"]))] == ["1"]


def test_classifier_refuses_rect(tmp_path) -> None:
    from libreyolo.tasks.classify import ClassifyTask

    with pytest.raises(ConfigError, match="rect=True is for detection"):
        ClassifyTask().check_train_options(TrainConfig.from_overrides({"rect": True}))


@pytest.fixture(scope="module")
def stretched_shapes(tiny_shapes, tmp_path_factory) -> Path:
    """The tiny shapes dataset with its images stretched to mixed aspect ratios (normalised labels
    stay right under a stretch): wide, tall and square images."""
    import shutil

    import cv2

    root = tmp_path_factory.mktemp("stretched") / "ds"
    shutil.copytree(Path(tiny_shapes).parent, root)
    sizes = [(32, 64), (28, 64), (64, 32), (64, 30), (64, 64), (60, 64), (32, 64), (64, 32)]
    for k, img in enumerate(sorted((root / "images").rglob("*.jpg"))):
        h, w = sizes[k % len(sizes)]
        cv2.imwrite(str(img), cv2.resize(cv2.imread(str(img)), (w, h)))
    for cache in root.rglob("*.cache"):
        cache.unlink()
    text = (root / "data.yaml").read_text().replace(str(Path(tiny_shapes).parent), str(root))
    (root / "data.yaml").write_text(text)
    return root / "data.yaml"


def test_rect_end_to_end_on_mixed_aspect_images(stretched_shapes, tmp_path, monkeypatch) -> None:
    seen: list[tuple[int, int]] = []
    orig = Trainer._forward

    def spy(self, imgs):
        seen.append((int(imgs.shape[-2]), int(imgs.shape[-1])))
        return orig(self, imgs)

    monkeypatch.setattr(Trainer, "_forward", spy)
    t = Trainer(Model(YOLO9(size="t", nc=6)),
                TrainConfig.from_overrides(tiny_overrides(stretched_shapes, tmp_path, epochs=2, rect=True, batch=2,
                                                          nbs=2, plots=True)))
    out = t.fit()
    run = Path(out["save_dir"])
    assert [r["epoch"] for r in _rows(run)] == ["1", "2"] and (run / "train_batch0.png").is_file()
    shapes = {tuple(s) for s in t.data.train_ds.batch_shapes.tolist()}
    assert len(shapes) > 1 and set(seen) == shapes  # rectangular, and exactly the batch shapes
    assert all(max(s) == 64 and s[0] % 32 == 0 and s[1] % 32 == 0 for s in seen)
    assert len(seen) == 2 * 4  # 8 images in batches of 2, each once per epoch
    assert np.isfinite(out["fitness"])


def test_ddp_two_cpu_processes_with_rect_and_multi_scale(stretched_shapes, tmp_path, monkeypatch) -> None:
    """Real torchrun launch (2 gloo processes): the rect batches are split over the ranks, both pick
    the same size per step, the run finishes and the replicas agree."""
    for k in ("WORLD_SIZE", "RANK", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
        monkeypatch.delenv(k, raising=False)
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    result = Model(YOLO9(size="t", nc=6)).train(**tiny_overrides(stretched_shapes, tmp_path, epochs=1, batch=4,
                                                                 rect=True, multi_scale=0.5, world_size=2))
    assert result["world_size"] == 2 and len(set(result["rank_digests"])) == 1
    assert [r["epoch"] for r in _rows(Path(result["save_dir"]))] == ["1"]
