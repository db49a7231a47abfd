from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture(scope="session")
def tiny_shapes(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A 8 + 4 image shapes dataset at 64 px (generated once per session)."""
    from libreyolo.data.shapes import ensure_shapes_dataset

    return ensure_shapes_dataset(tmp_path_factory.mktemp("shapes"), n_train=8, n_val=4, imgsz=64)
