"""SigLIP 2 image tower as a zero-shot classify family: size b16 (base, patch 16, 224 px);
t16 is a small size without published weights (SIZES[0], so the contract tests stay fast)."""

from __future__ import annotations

from typing import ClassVar

from .._vit.towers import TowerSpec
from .._vit.zero_shot import ZeroShotFamily
from .nn import SPECS


class SigLIP2(ZeroShotFamily):
    FAMILY: ClassVar[str] = "siglip2"
    SUPPORTS_CUDA_GRAPH: ClassVar[bool] = True  # docs/cuda-graph-parity.json (360bf40: every row bitwise)
    SUPPORTS_TRAIN_CUDA_GRAPH: ClassVar[bool] = True  # docs/cuda-graph-training-parity.json (360bf40)
    NAME_TOKEN: ClassVar[str] = "SigLIP2"  # LibreSigLIP2<size>-cls.pt
    SIZES: ClassVar[tuple[str, ...]] = tuple(SPECS)
    SPECS: ClassVar[dict[str, TowerSpec]] = SPECS
    STRIDE: ClassVar[int] = 16  # the patch size
    TEXT_TOWER_HINT: ClassVar[str] = (
        "libreyolo has no SigLIP 2 text tower (its Gemma SentencePiece tokenizer is not implemented): compute "
        "the class embeddings with transformers (libreyolo.models._vit.text_embeddings) and call "
        "set_class_embeddings(embeddings, names, scale=..., bias=...) (docs/zero-shot.md)")
