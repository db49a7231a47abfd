"""What the per-pixel ("map") tasks share: depth and semantic segmentation, and any new task whose
result is one map per image at the original image size.

A :class:`MapTask` letterboxes as detection does (:class:`~.base.LetterboxTask`); ``outputs``
passes each image's postprocessed map through the subclass's :attr:`MapTask.map_to_original`
(padding cut off, resized to the image) and moves it to the host. Its datasets are the map
datasets of :mod:`libreyolo.data.maps`: the training split takes the trainer's flip and colour
augmentation (:attr:`MapTask.augment_keys`); ``rect`` and ``single_cls`` are refused; ``imgsz``
defaults to the family's. A subclass names its results field, project, ``collate``,
``load_data``, ``map_dataset``, ``scorer`` and the two refusal phrases.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, ClassVar

from torch import Tensor

from ..errors import ConfigError
from .base import LetterboxTask, augment_options, run_defaults


class MapTask(LetterboxTask):
    val_losses: ClassVar[bool] = True  # the validation maps are the training targets too (letterboxed)
    augment_keys: ClassVar[tuple[str, ...]] = ("fliplr", "hsv_h", "hsv_s", "hsv_v")
    # the model, as the refusals name it ("a depth model") and why single_cls does not apply to it
    model_noun: ClassVar[str] = "a map model"
    single_cls_why: ClassVar[str] = "has no classes"
    # (map Tensor[..., h, w] at the network input, *, input_hw, ratio, pad, orig_hw) -> map at the image size
    map_to_original: ClassVar[Callable[..., Tensor]]

    # ------------------------------------------------------------------ prediction
    def outputs(self, twin: Any, raw: Any, *, items: list[Any], params: list[Any], opts: Any, decoded: bool,
                rerun: Any) -> list[Tensor]:
        maps = twin.postprocess(raw, conf=opts.conf, iou=opts.iou, classes=None, max_det=opts.max_det,
                                agnostic=False)
        out = [self.map_to_original(m, input_hw=p.out_shape, ratio=p.ratio, pad=p.pad, orig_hw=it.shape)
               for m, p, it in zip(maps, params, items, strict=True)]
        return [m.cpu() for m in out]

    # ------------------------------------------------------------------ data
    def dataset(self, config: Any, files: list[Any], *, split: str, imgsz: int, augment: bool = False,
                train_cfg: Any = None) -> Any:
        """:meth:`map_dataset` of the split; the training split takes the trainer's
        :attr:`augment_keys` options."""
        options = augment_options(train_cfg, self.augment_keys) if augment else {}
        return self.map_dataset(config, files, imgsz=imgsz, augment=augment, prefix=f"{split}: ", **options)

    def map_dataset(self, config: Any, files: list[Any], *, imgsz: int, augment: bool, prefix: str,
                    **options: Any) -> Any:
        """The dataset of ``files`` (the task's :class:`~libreyolo.data.maps.MapDataset`)."""
        raise NotImplementedError

    def check_train_options(self, cfg: Any) -> None:
        if cfg.single_cls:
            raise ConfigError(f"single_cls=True is for detection datasets; {self.model_noun} {self.single_cls_why}")
        if getattr(cfg, "rect", False):
            raise ConfigError(f"rect=True is for detection datasets (aspect-sorted rectangular batches); "
                              f"{self.model_noun} trains on square random crops")

    def train_defaults(self, family_imgsz: int, cfg: Any, explicit: set[str]) -> dict[str, Any]:
        """``imgsz`` defaults to the family's and ``project`` to the task's."""
        return run_defaults(self.project, explicit, family_imgsz)

    # ------------------------------------------------------------------ validation
    def val_outputs(self, model: Any, raw: Any, *, conf: float, iou: float, max_det: int) -> list[Tensor]:
        return model.postprocess(raw, conf=conf, iou=iou, classes=None, max_det=max_det, agnostic=False)
