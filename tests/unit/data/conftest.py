"""Fixtures for the data tests: a tiny generated shapes dataset and image/label writers."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import cv2
import numpy as np
import pytest


@pytest.fixture(scope="session")
def tiny_shapes(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """data.yaml of an 8 + 4 image shapes dataset at 64 px (generated once per session)."""
    from libreyolo.data.shapes import ensure_shapes_dataset

    return ensure_shapes_dataset(tmp_path_factory.mktemp("shapes"), n_train=8, n_val=4, imgsz=64)


def _write_image(path: Path, h: int = 48, w: int = 64, value: int = 90) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    if not cv2.imwrite(str(path), np.full((h, w, 3), value, np.uint8)):
        raise OSError(f"could not write {path}")
    return path


def _write_text(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


@pytest.fixture
def write_image() -> Callable[..., Path]:
    """write_image(path, h=48, w=64, value=90): a flat grey image file."""
    return _write_image


@pytest.fixture
def write_text() -> Callable[..., Path]:
    """write_text(path, text): a text file, parents created."""
    return _write_text
