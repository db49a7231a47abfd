"""A zero-shot model's class head changed after its prepared twin was built (``set_classes``,
``set_class_embeddings``: new names, a new class count, new embeddings) is what the next
``prepared()`` / ``predict`` runs: the twin is rebuilt without an explicit invalidate_graphs."""

from __future__ import annotations

import numpy as np
import torch

from libreyolo.model import Model
from libreyolo.registry import families


class _Tower:
    """Stands in for a text tower: one fixed unit embedding per name (by its length)."""

    def embed_classes(self, names: list[str], *, template: str) -> torch.Tensor:
        return torch.stack([torch.eye(512)[len(template.format(n))] for n in names])


def _model() -> Model:
    torch.manual_seed(0)
    return Model(families()["clip"](size="t16", nc=2))


IMG = np.random.default_rng(0).integers(0, 255, (40, 48, 3), dtype=np.uint8)


def test_set_classes_with_a_new_count_reaches_the_prepared_twin_and_predict() -> None:
    m = _model()
    before = m.prepared()
    assert before.nc == 2 and len(m.predict(IMG, imgsz=32)[0].probs.data) == 2
    m.set_classes(["cat", "horse", "cow"], template="a {}", text_tower=_Tower())
    twin = m.prepared()
    assert twin is not before
    assert twin.nc == 3 and twin.names == {0: "cat", 1: "horse", 2: "cow"}
    x = torch.rand(1, 3, 32, 32)
    with torch.inference_mode():
        assert twin.net(x).shape == (1, 3)
        torch.testing.assert_close(twin.net(x), m.net(x))
    r = m.predict(IMG, imgsz=32)[0]
    assert len(r.probs.data) == 3 and r.names == {0: "cat", 1: "horse", 2: "cow"}


def test_new_embeddings_of_the_same_count_reach_the_prepared_twin() -> None:
    m = _model()
    before = m.prepared()
    x = torch.rand(1, 3, 32, 32)
    with torch.inference_mode():
        old = before.net(x)
    m.set_class_embeddings(torch.randn(2, 512), ["sun", "moon"])
    twin = m.prepared()
    assert twin.names == {0: "sun", 1: "moon"}
    with torch.inference_mode():
        new = twin.net(x)
        torch.testing.assert_close(new, m.net(x))
    assert not torch.allclose(new, old)
    assert m.predict(IMG, imgsz=32)[0].names == {0: "sun", 1: "moon"}


def test_an_unchanged_head_keeps_the_twin() -> None:
    m = _model()
    assert m.prepared() is m.prepared()
