"""Class text embeddings for the zero-shot towers, computed once with transformers (optional).

The class head of ``clip`` / ``siglip2`` holds embeddings the user supplies
(:meth:`~libreyolo.models._vit.zero_shot.ZeroShotFamily.set_class_embeddings`) or that a text tower
of the library makes (:meth:`~libreyolo.models._vit.zero_shot.ZeroShotFamily.set_classes`; CLIP has
one, :mod:`libreyolo.models.clip.text`, SigLIP 2 none). This module is the transformers route, for
any contrastive checkpoint (SigLIP 2 included): when
transformers is installed and a contrastive checkpoint is on disk (a folder with ``config.json``,
the weights and the tokenizer files: ``CLIPModel`` or ``SiglipModel``), :func:`load_text_tower`
reads it without network access and :func:`class_text_embeddings` runs its text tower over one
prompt per class. Nothing here is imported by the families.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from ...errors import ConfigError


def load_text_tower(folder: str | Path) -> tuple[Any, Any]:
    """(model, tokenizer) of a local transformers CLIP/SigLIP checkpoint folder (``local_files_only``).

    Example:
        >>> load_text_tower("/no/such/folder")
        Traceback (most recent call last):
        ...
        libreyolo.errors.ConfigError: text-tower folder '/no/such/folder' does not exist; pass a local ...
    """
    path = Path(folder)
    if not path.is_dir():
        raise ConfigError(f"text-tower folder '{folder}' does not exist; pass a local transformers checkpoint "
                          "folder (config.json, weights, tokenizer files)")
    try:
        from transformers import AutoModel, AutoTokenizer
    except ImportError as e:  # pragma: no cover - transformers is an optional dependency
        raise ConfigError("class_text_embeddings needs transformers; pip install transformers") from e
    model = AutoModel.from_pretrained(str(path), local_files_only=True).eval()
    tokenizer = AutoTokenizer.from_pretrained(str(path), local_files_only=True)
    return model, tokenizer


@torch.no_grad()
def class_text_embeddings(model: Any, tokenizer: Callable[..., Any], names: Sequence[str], *,
                          template: str = "a photo of a {}.") -> tuple[Tensor, float, float]:
    """(embeddings Tensor[nc, E], scale, bias) for class ``names`` through a transformers contrastive
    ``model`` (``get_text_features``) and its ``tokenizer``; ``template`` makes the prompt. scale is
    ``exp(logit_scale)`` and bias ``logit_bias`` (0 for CLIP), the values
    :meth:`set_class_embeddings` takes. SigLIP tokenizers are called with ``padding="max_length"``
    (the text tower was trained that way), others with ``padding=True``.

    Example:
        >>> def tok(texts, **kw):  # a stand-in tokenizer: one token id per character, fixed length
        ...     return {"input_ids": torch.tensor([[ord(c) % 7 for c in t[:6].ljust(6)] for t in texts])}
        >>> class Tower(torch.nn.Module):
        ...     logit_scale = torch.nn.Parameter(torch.tensor(0.0))
        ...     def get_text_features(self, input_ids):
        ...         return input_ids.float()
        >>> emb, scale, bias = class_text_embeddings(Tower(), tok, ["cat", "dog"], template="{}")
        >>> tuple(emb.shape), scale, bias
        ((2, 6), 1.0, 0.0)
    """
    if not names:
        raise ConfigError("class_text_embeddings needs at least one class name")
    siglip = "siglip" in str(getattr(getattr(model, "config", None), "model_type", ""))
    padding: str | bool = "max_length" if siglip else True
    batch = tokenizer([template.format(n) for n in names], padding=padding, return_tensors="pt")
    out = model.get_text_features(**{k: v for k, v in dict(batch).items() if k in ("input_ids", "attention_mask")})
    emb = out if isinstance(out, Tensor) else out.pooler_output
    scale = float(model.logit_scale.detach().float().exp()) if hasattr(model, "logit_scale") else 100.0
    bias = float(model.logit_bias.detach().float().reshape(())) if getattr(model, "logit_bias", None) is not None else 0.0
    return emb.detach().float(), scale, bias
