"""transformers CLIP checkpoints (``model_type`` ``"clip"`` or ``"clip_vision_model"``) onto the
CLIP tower (names: :mod:`libreyolo.models._vit.tower_convert`; the class head waits for
:meth:`set_class_embeddings` or :meth:`set_classes`).

The text tower never enters the image network: :func:`adapt_model` builds it beside the family
(``model.text_tower``, a :class:`~.text.TextTower`) when the file is a whole ``CLIPModel`` and its
folder holds the tokenizer files (``vocab.json``, ``merges.txt``); otherwise
``model.text_tower_reason`` says why there is none.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

from ...errors import ConfigError
from .._vit.tower_convert import NO_CLASSES_NC, convert_state_dict, match_tower
from .nn import SPECS
from .text import build_text_tower
from .tokenizer import CLIPTokenizer

logger = logging.getLogger(__name__)
SOURCES = ("transformers",)
MODEL_TYPES = ("clip", "clip_vision_model")
SIZES = {(spec.dim, spec.patch): size for size, spec in SPECS.items()}  # (width, patch) -> size
__all__ = ["SOURCES", "MODEL_TYPES", "NO_CLASSES_NC", "match", "adapt_model", "convert_state_dict"]


def match(fw: Any) -> tuple[str, int] | None:
    return match_tower(fw, MODEL_TYPES, SIZES)


def adapt_model(model: Any, fw: Any) -> None:
    """Keep the text tower of a whole ``CLIPModel`` file beside ``model`` (module docstring).

    Raises:
        CheckpointError: the file's text tensors do not fit a CLIP text tower (the key is named).
    """
    if not any(k.startswith("text_model.") for k in fw.state_dict):
        model.text_tower_reason = (f"'{fw.path}' holds the image tower only ({fw.arch}); a whole CLIPModel "
                                   "checkpoint folder carries the text tower")
        return
    folder = Path(fw.path).parent
    try:
        tokenizer = CLIPTokenizer.from_folder(folder)
        config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    except (ConfigError, OSError, ValueError) as e:
        model.text_tower_reason = str(e)
        logger.info("CLIP text tower of '%s' not kept: %s", fw.path, e)
        return
    model.text_tower = build_text_tower(fw.state_dict, config, tokenizer)
    logger.info("kept the CLIP text tower of '%s' (%d blocks, width %d) for set_classes", fw.path,
                model.text_tower.transformer.spec.depth, model.text_tower.transformer.spec.width)
