"""The validation loader's batch cache: later passes replay the first complete pass's batches
(same values, the source not read again); early stops and sets over the size cap keep nothing;
a real validation scores the same from the cache as from the loader."""

from __future__ import annotations

import pytest
import torch

from libreyolo.data.loader import BatchCache, batch_nbytes


class Counting:
    """A loader that counts its passes and yields fresh batches each time (as a DataLoader does)."""

    def __init__(self, n: int = 3) -> None:
        self.n, self.passes = n, 0
        self.dataset = "the dataset"

    def __len__(self) -> int:
        return self.n

    def __iter__(self):
        self.passes += 1
        for i in range(self.n):
            yield {"img": torch.full((2, 3, 4, 4), i, dtype=torch.uint8), "cls": torch.tensor([float(i)])}


def test_second_pass_replays_the_first_without_reading_the_loader() -> None:
    src = Counting()
    cache = BatchCache(src, max_bytes=1 << 20)
    first = [b["img"][0, 0, 0, 0].item() for b in cache]
    assert cache.cached and src.passes == 1
    second = [b["img"][0, 0, 0, 0].item() for b in cache]
    assert first == second == [0, 1, 2] and src.passes == 1
    assert len(cache) == 3 and cache.dataset == "the dataset"


def test_a_pass_stopped_early_keeps_nothing() -> None:
    src = Counting()
    cache = BatchCache(src, max_bytes=1 << 20)
    for _ in cache:
        break
    assert not cache.cached
    assert [b["cls"].item() for b in cache] == [0.0, 1.0, 2.0] and src.passes == 2 and cache.cached


def test_a_set_over_the_cap_streams_every_pass() -> None:
    src = Counting()
    one = batch_nbytes(next(iter(Counting())))
    assert one == 2 * 3 * 4 * 4 + 4  # uint8 image + one float32
    cache = BatchCache(src, max_bytes=2 * one)  # three batches do not fit
    assert len(list(cache)) == 3 and len(list(cache)) == 3
    assert not cache.cached and cache.too_large and src.passes == 2


@pytest.fixture(scope="module")
def val_yaml(tmp_path_factory):
    from libreyolo.data.shapes import ensure_shapes_dataset

    return ensure_shapes_dataset(tmp_path_factory.mktemp("cshapes"), n_train=2, n_val=6, imgsz=320)


def test_validation_scores_the_same_from_the_cache(val_yaml) -> None:
    from libreyolo import LibreYOLO
    from libreyolo.data.config import load_data_config
    from libreyolo.data.dataset import DetectionDataset
    from libreyolo.data.loader import build_dataloader
    from libreyolo.engine.validator import run_validation

    torch.manual_seed(0)
    model = LibreYOLO("LibreYOLO9t.pt")  # the bundled checkpoint, trained on the shapes set
    d = load_data_config(str(val_yaml))
    ds = DetectionDataset(d.val, imgsz=320, augment=False, nc=d.nc)
    loader = build_dataloader(ds, batch=4, workers=0, shuffle=False, seed=0)
    cache = BatchCache(loader)
    kw = dict(model=model, net=model.net, names=model.names, conf=0.0001, verbose=False, progress=False)
    model.net.train()
    direct = run_validation(loader=loader, **kw)
    assert all(m.training for m in model.net.modules())  # each module's mode restored
    streamed = run_validation(loader=cache, **kw)
    replayed = run_validation(loader=cache, **kw)
    assert cache.cached
    keys = ("mAP50-95", "mAP50", "precision", "recall")
    assert direct["mAP50"] > 0.5  # a trained model: the comparison below is not of zeros
    assert [direct[k] for k in keys] == [streamed[k] for k in keys] == [replayed[k] for k in keys]
