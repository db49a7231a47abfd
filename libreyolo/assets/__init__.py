"""Files shipped with the package: the sample image and the demo checkpoint."""

from __future__ import annotations

from pathlib import Path

ASSETS_DIR = Path(__file__).resolve().parent
SAMPLE_IMAGE = str(ASSETS_DIR / "sample.jpg")
DEMO_WEIGHTS = "LibreYOLO9t.pt"
