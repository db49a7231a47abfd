from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture(scope="session")
def tiny_cls(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A shapes-cls dataset with 6 train + 2 val crops per class (generated once per session)."""
    from libreyolo.data.shapes_cls import ensure_shapes_cls_dataset

    return ensure_shapes_cls_dataset(tmp_path_factory.mktemp("shapes_cls"), n_train=6, n_val=2)
