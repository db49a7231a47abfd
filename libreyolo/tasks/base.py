"""The :class:`Task` interface: the hooks shared code calls, one implementation per task."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, ClassVar

import torch
from torch import Tensor

if TYPE_CHECKING:
    import numpy as np


class Task:
    """One kind of output (detection boxes, class probabilities, ...) and what it needs.

    Prediction (:func:`libreyolo.engine.predictor.predict`): :meth:`preprocess` builds the
    network input from the source items, :meth:`predict_decoded` says whether the family's
    captured decode runs inside the graph, :meth:`outputs` turns the raw outputs into the
    per-image values of ``Results.<results_field>`` (on the host, in original image pixels).

    Data and validation (:mod:`libreyolo.engine.validator`, :mod:`libreyolo.training.data_setup`):
    :meth:`load_data` reads a dataset description, :meth:`dataset` builds a split,
    :meth:`val_outputs` and :meth:`scorer` score predictions against the labels.
    """

    name: ClassVar[str] = ""
    results_field: ClassVar[str] = ""  # the Results attribute predict fills ("boxes", "probs")
    project: ClassVar[str] = ""  # default run folder of train/val/predict: runs/<task>
    tracks: ClassVar[bool] = False  # track() applies (per-frame boxes to associate)
    plots: ClassVar[bool] = False  # val/train pictures exist for this task (val_plots)
    collate: ClassVar[Any] = None  # the DataLoader collate_fn of its datasets (None: the loader default)
    scans_labels: ClassVar[bool] = False  # building the training set scans and caches label files
    drop_partial_batch: ClassVar[bool] = False  # the training loader drops a last partial batch
    val_losses: ClassVar[bool] = False  # validation also reports the training criterion's losses
    # the validation metrics results.csv logs as metrics/<key> columns, in this order (those present)
    metric_keys: ClassVar[tuple[str, ...]] = ()

    # ------------------------------------------------------------------ prediction
    def preprocess(self, items: list[Any], *, imgsz: tuple[int, int], device: torch.device, dtype: torch.dtype,
                   channels_last: bool, rect: bool, stride: int) -> tuple[Tensor, list[Any]]:
        """Source items -> (network input Tensor[B, 3, H, W] ``dtype`` in [0, 1] on ``device``,
        per-image parameters :meth:`outputs` needs to map back to the original image)."""
        raise NotImplementedError

    def preprocess_pixels(self, items: list[Any], *, imgsz: tuple[int, int], device: torch.device,
                          dtype: torch.dtype, channels_last: bool, rect: bool,
                          stride: int) -> tuple[Tensor, list[Any], Any] | None:
        """:meth:`preprocess` without its last step, for a graph that runs that step as its first
        kernels: (the network's input before that step, the parameters, the step: a hashable
        callable that turns the first into what :meth:`preprocess` returns). ``None`` (default):
        this task has no such split, so the predictor calls :meth:`preprocess`."""
        return None

    def predict_decoded(self, twin: Any, opts: Any) -> bool:
        """Whether prediction runs the family's decode inside the network step."""
        return False

    def network_scope(self, twin: Any, opts: Any, params: list[Any]) -> Any:
        """A context manager the predictor opens around the network step of a batch (the prompt
        task hands its prompts to the family's eager stage). Default: nothing."""
        from contextlib import nullcontext

        return nullcontext()

    def outputs(self, twin: Any, raw: Any, *, items: list[Any], params: list[Any], opts: Any, decoded: bool,
                rerun: Any) -> list[Tensor]:
        """Raw network outputs -> one float32 CPU tensor per image (what ``Results`` holds).
        ``rerun()`` runs the network again without the decode (the raw head outputs)."""
        raise NotImplementedError

    # ------------------------------------------------------------------ data
    def load_data(self, data: str) -> Any:
        """The dataset description (splits, classes) named by ``data`` (a yaml, folder, built-in name)."""
        raise NotImplementedError

    def dataset(self, config: Any, files: list[Any], *, split: str, imgsz: int, augment: bool,
                **options: Any) -> Any:
        """The dataset of one split (``files`` of ``config``); ``options`` are the trainer's
        augmentation / label options this task reads."""
        raise NotImplementedError

    def data_arch(self, config: Any) -> dict[str, Any]:
        """Architecture options the dataset ``config`` asks of the model (a pose dataset's keypoint
        count); training rebuilds the head when they differ from the model's. Default: none."""
        return {}

    def check_train_options(self, cfg: Any) -> None:
        """Refuse training options that do not apply to this task (clear ``ConfigError``)."""

    def train_defaults(self, family_imgsz: int, cfg: Any, explicit: set[str]) -> dict[str, Any]:
        """Training keys this task sets when the user did not (``explicit``): e.g. the image size."""
        return {}

    # ------------------------------------------------------------------ validation
    def val_outputs(self, model: Any, raw: Any, *, conf: float, iou: float, max_det: int) -> Any:
        """Raw outputs of a validation batch -> what :meth:`scorer` consumes."""
        raise NotImplementedError

    def scorer(self, names: dict[int, str]) -> Any:
        """A fresh accumulator: ``add(batch, outputs, input_hw)``, then ``result(...)``."""
        raise NotImplementedError

    def plot_rows(self, output: Any) -> Any:
        """One image's validation output (an item of :meth:`val_outputs`) as the rows the
        ``val_batch`` picture draws (ndarray[P, 6+]: x1 y1 x2 y2 input pixels, score, class, then
        what the task adds); only for a task with ``plots``. Default: the detection tensor itself."""
        return output.detach().float().cpu().numpy()


def to_host(values: list[Tensor]) -> list[Tensor]:
    """Per-image tensors -> float32 CPU tensors with one device-to-host copy for the batch."""
    if not values or values[0].device.type == "cpu":
        return [v.float() for v in values]
    sizes = [int(v.shape[0]) for v in values]
    return list(torch.cat([v.float() for v in values]).cpu().split(sizes))


def ndarray(x: Any) -> np.ndarray:
    import numpy as np

    return x.detach().cpu().numpy() if isinstance(x, Tensor) else np.asarray(x)


class LetterboxTask(Task):
    """A task whose network input is the detection letterbox (:mod:`.detect.preprocess`: aspect
    kept, 114 grey padding, a single image at the smallest stride-multiple rectangle with
    ``rect=True``; on CUDA a BGR batch has its channels swapped on the device)."""

    def preprocess(self, items: list[Any], *, imgsz: tuple[int, int], device: torch.device, dtype: torch.dtype,
                   channels_last: bool, rect: bool, stride: int) -> tuple[Tensor, list[Any]]:
        from .detect import _pixels
        from .detect.preprocess import preprocess

        pixels, in_bgr = _pixels(items, device)
        return preprocess(pixels, imgsz, device, dtype=dtype, channels_last=channels_last, rect=rect,
                          stride=stride, bgr=in_bgr)

    def preprocess_pixels(self, items: list[Any], *, imgsz: tuple[int, int], device: torch.device,
                          dtype: torch.dtype, channels_last: bool, rect: bool,
                          stride: int) -> tuple[Tensor, list[Any], Any] | None:
        from .detect import _pixels
        from .detect.preprocess import preprocess_pixels

        pixels, in_bgr = _pixels(items, device)
        return preprocess_pixels(pixels, imgsz, device, dtype=dtype, channels_last=channels_last, rect=rect,
                                 stride=stride, bgr=in_bgr)


def augment_options(train_cfg: Any, keys: tuple[str, ...], *, jitter_scale: bool = False) -> dict[str, Any]:
    """The trainer's augmentation values ``keys`` (those ``train_cfg`` has) as dataset options;
    with ``jitter_scale`` its ``scale`` too, as the range ``(max(0.1, 1 - scale), 1 + scale)``.

    Example:
        >>> from types import SimpleNamespace
        >>> augment_options(SimpleNamespace(fliplr=0.5, scale=0.25), ("fliplr", "hsv_h"), jitter_scale=True)
        {'fliplr': 0.5, 'scale': (0.75, 1.25)}
    """
    if train_cfg is None:
        return {}
    options = {k: getattr(train_cfg, k) for k in keys if hasattr(train_cfg, k)}
    if jitter_scale and hasattr(train_cfg, "scale"):
        options["scale"] = (max(0.1, 1.0 - float(train_cfg.scale)), 1.0 + float(train_cfg.scale))
    return options


def run_defaults(project: str, explicit: set[str], family_imgsz: int | None = None) -> dict[str, Any]:
    """What :meth:`Task.train_defaults` returns for the usual task: ``project`` (and the family's
    ``imgsz`` when given) unless the user set them (``explicit``).

    Example:
        >>> run_defaults("runs/depth", {"project"}, 518)
        {'imgsz': 518}
    """
    changes: dict[str, Any] = {}
    if family_imgsz is not None and "imgsz" not in explicit:
        changes["imgsz"] = int(family_imgsz)
    if "project" not in explicit:
        changes["project"] = project
    return changes


class TaskMetrics(dict):
    """Base of a task's validation result: the headline numbers as a dict, with attached
    ``speed`` (ms per image by stage), ``save_dir`` and the validation ``losses``; ``to_dict`` /
    ``to_json`` give them JSON-ready, with a subclass's :meth:`details` between the metrics and
    the speed.

    Example:
        >>> m = TaskMetrics({"fitness": 0.5})
        >>> m.to_json(indent=None)
        '{"metrics": {"fitness": 0.5}, "speed": {"preprocess": 0.0, "inference": 0.0, "postprocess": 0.0}, "losses": {}, "save_dir": null}'
    """

    def __init__(self, values: dict[str, float], *, speed: dict[str, float] | None = None,
                 save_dir: Any = None, losses: dict[str, float] | None = None) -> None:
        super().__init__(values)
        self.speed = dict(speed or {"preprocess": 0.0, "inference": 0.0, "postprocess": 0.0})
        self.save_dir = save_dir
        self.losses = dict(losses or {})

    def details(self) -> dict[str, Any]:
        """What a subclass adds to :meth:`to_dict` (per-class tables, ...); JSON-ready."""
        return {}

    def to_dict(self) -> dict[str, Any]:
        """Everything as JSON-ready Python types."""
        return {"metrics": {k: float(v) for k, v in self.items()}, **self.details(),
                "speed": {k: float(v) for k, v in self.speed.items()},
                "losses": {k: float(v) for k, v in self.losses.items()},
                "save_dir": str(self.save_dir) if self.save_dir is not None else None}

    def to_json(self, *, indent: int | None = 2) -> str:
        """:meth:`to_dict` as a JSON string."""
        import json

        return json.dumps(self.to_dict(), indent=indent)
