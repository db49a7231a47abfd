"""Fixtures of the export tests."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def trained():
    """The bundled checkpoint (trained on the shapes set, 6 classes), and its fused twin."""
    from libreyolo import LibreYOLO

    model = LibreYOLO("LibreYOLO9t.pt")
    return model, model.prepared(fuse=True)
