"""CLIP image tower as a zero-shot classify family: size b16 (ViT-B/16); t16 is a
small size without published weights (SIZES[0], so the contract tests stay fast)."""

from __future__ import annotations

from typing import ClassVar

from .._vit.towers import TowerSpec
from .._vit.zero_shot import ZeroShotFamily
from .nn import SPECS


class CLIP(ZeroShotFamily):
    FAMILY: ClassVar[str] = "clip"
    SUPPORTS_CUDA_GRAPH: ClassVar[bool] = True  # docs/cuda-graph-parity.json (360bf40: every row bitwise)
    SUPPORTS_TRAIN_CUDA_GRAPH: ClassVar[bool] = True  # docs/cuda-graph-training-parity.json (360bf40)
    NAME_TOKEN: ClassVar[str] = "CLIP"  # LibreCLIP<size>-cls.pt
    SIZES: ClassVar[tuple[str, ...]] = tuple(SPECS)
    SPECS: ClassVar[dict[str, TowerSpec]] = SPECS
    STRIDE: ClassVar[int] = 16  # the patch size
    TEXT_TOWER_HINT: ClassVar[str] = (
        "load one with libreyolo.models.clip.text.load_text_tower(folder) and pass text_tower=..., or load the image "
        "tower from a whole CLIPModel folder (LibreYOLO('folder/model.safetensors') with vocab.json and merges.txt "
        "beside it), or call set_class_embeddings(embeddings, names) (docs/zero-shot.md)")
