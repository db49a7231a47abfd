"""Family glue of the contrastive image towers (CLIP, SigLIP 2) as zero-shot classifiers.

A subclass declares ``FAMILY``, ``NAME_TOKEN``, ``SIZES`` and ``SPECS`` (size ->
:class:`~libreyolo.models._vit.towers.TowerSpec`). The class head holds one L2-normalised text
embedding per class (:meth:`ZeroShotFamily.set_class_embeddings`). The embeddings come from the
user (computed once, e.g. with transformers: :mod:`libreyolo.models._vit.text_embeddings`) or from
a text tower kept beside the image network (``text_tower``: an object with
``embed_classes(names, template=...)``, which a family's converter may attach; CLIP's is
:class:`libreyolo.models.clip.text.TextTower`) through :meth:`ZeroShotFamily.set_classes`. The text
tower is never part of ``net``: graphs do not capture it and checkpoints do not save it. The head's
weights, scale and bias are ordinary state-dict entries and the names ride in the checkpoint, so
both survive save/load.

``fused_attn`` is off by default for both towers (SPEC K-9: SDPA becomes a default only after a
byte-exact parity run; SigLIP 2 is named among the flag families, and CLIP is held to the same
bar although transformers runs SDPA upstream). The flag flips it (``set_arch(fused_attn=True)``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar

import torch
from torch import Tensor, nn

from ...errors import ConfigError
from .._base.names import normalise_names
from .family import VisionTransformerFamily
from .towers import ImageTower, TowerClassifier, TowerSpec, ZeroShotHead


class ZeroShotFamily(VisionTransformerFamily):
    """Base of the contrastive-tower classify families (module docstring)."""

    SPECS: ClassVar[dict[str, TowerSpec]] = {}  # type: ignore[assignment]
    # how a user gets a text tower for set_classes (the family's own words), and the instance's state
    TEXT_TOWER_HINT: ClassVar[str] = ("compute one text embedding per class with the matching text tower and call "
                                      "set_class_embeddings(embeddings, names) (docs/zero-shot.md)")
    text_tower: Any = None  # set on an instance by the family's converter, or by the user
    text_tower_reason: str = "no text tower was loaded with this model"
    FUSED_ATTN_DEFAULT: ClassVar[bool] = False  # SPEC K-9 (module docstring)
    SUPPORTS_CUDA_GRAPH: ClassVar[bool] = False
    CUDA_GRAPH_REASON: ClassVar[str] = "no bitwise parity run recorded yet"
    SUPPORTS_TRAIN_CUDA_GRAPH: ClassVar[bool] = False
    TRAIN_CUDA_GRAPH_REASON: ClassVar[str] = "no bitwise parity run recorded yet"
    # fine-tuning a pretrained tower: AdamW at a low rate (freeze="body.encoder" trains the head alone)
    TRAIN_DEFAULTS: ClassVar[dict[str, object]] = {
        "optimizer": "AdamW", "lr0": 1e-5, "momentum": 0.9, "weight_decay": 0.05, "warmup_bias_lr": 0.0,
    }

    @classmethod
    def build_net(cls, *, size: str, nc: int, task: str, fused_attn: bool | None = None) -> nn.Module:
        if size not in cls.SPECS:
            raise ConfigError(f"{cls.FAMILY} has no size {size!r}; sizes: {', '.join(cls.SPECS)}")
        on = cls.FUSED_ATTN_DEFAULT if fused_attn is None else bool(fused_attn)
        return TowerClassifier(ImageTower(cls.SPECS[size], nc=nc, fused_attn=on))

    @property
    def embed_dim(self) -> int:
        """Width of the image (and class) embeddings."""
        return self.SPECS[self.size].out_dim

    def embed(self, images: Tensor) -> Tensor:
        """[0, 1] RGB Tensor[B, 3, H, W] -> image embeddings Tensor[B, ``embed_dim``] (not normalised).

        Example:
            >>> from libreyolo.registry import families
            >>> fam = families()["clip"](size="t16", nc=2)
            >>> tuple(fam.embed(torch.rand(1, 3, 32, 32)).shape)
            (1, 512)
        """
        with torch.no_grad():
            return self.net.embed(images.to(self.device))

    def set_class_embeddings(self, embeddings: Tensor, names: list[str] | dict[int, str] | None = None, *,
                             scale: float | None = None, bias: float | None = None) -> None:
        """Make the head the zero-shot classifier of ``embeddings`` Tensor[nc, ``embed_dim``] (one text
        embedding per class, normalised here) with class ``names``; ``scale``/``bias`` replace the
        logit scale and bias (CLIP: 100 and 0; SigLIP: its learned ``exp(logit_scale)`` and
        ``logit_bias``). A new class count replaces the head. On a ``LibreYOLO`` model the next
        ``predict`` / ``prepared()`` rebuilds a prepared copy made before (the names are rebound,
        which the backend checks: :meth:`~libreyolo.backends.torch.TorchBackend.prepared`).

        Example:
            >>> from libreyolo.registry import families
            >>> fam = families()["clip"](size="t16", nc=2)
            >>> fam.set_class_embeddings(torch.randn(3, 512), ["cat", "dog", "car"])
            >>> fam.nc, fam.names[2], tuple(fam.net(torch.rand(1, 3, 32, 32)).shape)
            (3, 'car', (1, 3))
        """
        if not isinstance(embeddings, Tensor) or embeddings.ndim != 2 or embeddings.shape[1] != self.embed_dim:
            shape = tuple(embeddings.shape) if isinstance(embeddings, Tensor) else type(embeddings).__name__
            raise ConfigError(f"class embeddings {shape} do not fit {self.FAMILY} {self.size}; pass a "
                              f"Tensor[nc, {self.embed_dim}] (one text embedding per class)")
        nc = int(embeddings.shape[0])
        names = normalise_names(names, nc)
        body = self.net.body
        if nc != self.nc:
            old: ZeroShotHead = body.head
            head = ZeroShotHead(self.embed_dim, nc, scale=float(old.scale), bias=float(old.bias))
            body.head = head.to(device=old.weight.device, dtype=old.weight.dtype)
            self.nc = nc
        body.head.set_embeddings(embeddings, scale=scale, bias=bias)
        self.names = names

    def set_classes(self, names: Sequence[str], *, template: str | Sequence[str] = "a photo of a {}.",
                    text_tower: Any = None) -> None:
        """Make the head the zero-shot classifier of class ``names``: each ``template.format(name)``
        (several templates: their normalised embeddings averaged) is embedded by ``text_tower``
        (default: the one kept with this model, ``self.text_tower``), then
        :meth:`set_class_embeddings` (scale and bias unchanged), whose new head the next ``predict``
        of a ``LibreYOLO`` model runs.

        Raises:
            ConfigError: no text tower (the message says how to get one), no names, a bad template.

        Example:
            >>> from libreyolo.registry import families
            >>> class Tower:  # stands in for a text tower: one fixed embedding per name
            ...     def embed_classes(self, names, *, template):
            ...         return torch.stack([torch.eye(512)[len(template.format(n))] for n in names])
            >>> fam = families()["clip"](size="t16", nc=2)
            >>> fam.set_classes(["cat", "horse", "cow"], template="a {}", text_tower=Tower())
            >>> fam.nc, fam.names[1], int(fam.net.body.head.weight[1].argmax())
            (3, 'horse', 7)
        """
        tower = text_tower if text_tower is not None else self.text_tower
        if tower is None:
            raise ConfigError(f"{self.FAMILY} {self.size} has no text tower to embed class names "
                              f"({self.text_tower_reason}); {self.TEXT_TOWER_HINT}")
        if isinstance(names, str) or not names or not all(isinstance(n, str) and n for n in names):
            raise ConfigError(f"set_classes takes a list of non-empty class-name strings, got {names!r}")
        names = list(names)
        self.set_class_embeddings(tower.embed_classes(names, template=template), names)
