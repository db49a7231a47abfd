"""The CLI commands: their keys (with kinds, defaults, help) and the API call each one makes.

Each ``run_*`` takes the typed keyword arguments from :func:`libreyolo.cli.parse.resolve`, calls
the Python API, prints a short report on stdout and returns the exit status. Validation of the
values themselves is the API's job (``PredictOptions``, ``TrainConfig``, ``ExportConfig``...).
"""

from __future__ import annotations

import dataclasses
import inspect
import logging
import os
import sys
import time
import typing
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import ConfigError, LibreYOLOError
from .parse import API_DEFAULT, Key, Kind

logger = logging.getLogger(__name__)

DEFAULT_MODEL = "LibreYOLO9t.pt"


class FeatureUnavailable(LibreYOLOError):
    """A command whose implementation is not part of this installation."""

    exit_code = 1


@dataclass(frozen=True, kw_only=True)
class Command:
    name: str
    summary: str
    example: str
    run: Callable[[dict[str, Any], bool], int]  # (kwargs, quiet) -> exit status
    keys: Callable[[], dict[str, Key] | None]  # None: any key (validated by the API)
    loads_model: bool = True


def _model_keys() -> list[Key]:
    return [
        Key(name="model", kind="str", default=DEFAULT_MODEL, pass_default=True,
            help="weights name or path, e.g. LibreYOLO9t.pt or runs/detect/train/weights/best.pt"),
        Key(name="pretrained", kind="bool", default=True, pass_default=True,
            help="load weights; false builds an untrained model of the family/size the name gives"),
    ]


def _as_dict(keys: list[Key]) -> dict[str, Key]:
    return {k.name: k for k in keys}


# ---------------------------------------------------------------------------- predict
# How ``libreyolo predict`` differs from ``model.predict()`` (its keys are PredictOptions' fields):
# it adds the model keys and ``source`` (default: the sample image, shown as SAMPLE_IMAGE); it
# saves by default (``save=true``: a command's output is the files; Python's default is False);
# and it has no ``bgr`` (that key is about numpy arrays, which a command line cannot pass).
_PREDICT_NOT_ON_CLI = ("bgr", "points", "labels", "boxes", "multimask_output")  # prompts: Python API only


def _predict_keys() -> dict[str, Key]:
    from ..assets import SAMPLE_IMAGE
    from ..engine.predictor import PredictOptions

    keys = _as_dict(_dataclass_keys(PredictOptions, exclude=_PREDICT_NOT_ON_CLI))
    keys["save"] = dataclasses.replace(keys["save"], default=True, pass_default=True)
    return _as_dict([
        *_model_keys(),
        Key(name="source", kind="source", default=SAMPLE_IMAGE, pass_default=True, shown="SAMPLE_IMAGE",
            help="image, video, folder, glob, or a comma-separated list of paths (default: the sample image)"),
        *keys.values(),
    ])


def run_predict(kw: dict[str, Any], quiet: bool) -> int:
    from ..model import LibreYOLO

    model = LibreYOLO(kw.pop("model"), pretrained=kw.pop("pretrained"))
    source = kw.pop("source")
    t0 = time.perf_counter()
    totals = {"preprocess": 0.0, "inference": 0.0, "postprocess": 0.0, "results": 0.0}
    skipped = _SkipCounter()
    with skipped:
        results = model.predict(source, stream=True, **kw)
        n, frames, saved = _report_predictions(results, totals, quiet)
    wall = time.perf_counter() - t0
    label = {"preprocess": "pre", "inference": "inference", "postprocess": "post", "results": "results"}
    mean = ", ".join(f"{v / max(n, 1):.1f} ms {label[k]}" for k, v in totals.items())
    unit = "frame" if n and frames == n else "image"
    note = f" ({len(skipped.paths)} unreadable file{'s' if len(skipped.paths) != 1 else ''} skipped)" \
        if skipped.paths else ""
    print(f"{n} {unit}{'s' if n != 1 else ''} in {wall:.2f} s{note}; per {unit}: {mean}")
    if saved is not None:
        print(f"Results saved to {saved}")
    return 0


class _SkipCounter(logging.Handler):
    """Collects the files the source loader skipped (its warnings carry ``skipped_source``)."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.paths: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        path = getattr(record, "skipped_source", None)
        if path is not None:
            self.paths.append(str(path))

    def __enter__(self) -> _SkipCounter:
        self._logger = logging.getLogger("libreyolo.engine.sources")
        self._logger.addHandler(self)
        return self

    def __exit__(self, *exc: object) -> None:
        self._logger.removeHandler(self)


def _report_predictions(results: Any, totals: dict[str, float], quiet: bool) -> tuple[int, int, Any]:
    n, frames, saved = 0, 0, None
    for r in results:
        n += 1
        frames += r.frame is not None
        for k in totals:
            totals[k] += float(r.speed.get(k, 0.0))
        if r.save_path is not None:  # the folder all results went to (sub-folders for same-named inputs)
            parent = r.save_path.parent
            saved = parent if saved is None else Path(os.path.commonpath([saved, parent]))
        if not quiet:
            where = r.path if r.path is not None else f"image {n}"
            if r.frame is not None:
                where = f"{where} frame {r.frame}"
            h, w = r.orig_shape
            sp = r.speed
            print(f"{where} ({w}x{h}): {r.verbose()} | {sp.get('preprocess', 0):.1f} ms pre, "
                  f"{sp.get('inference', 0):.1f} ms inference, {sp.get('postprocess', 0):.1f} ms post", flush=True)
    return n, frames, saved


# ---------------------------------------------------------------------------- train / val / export
def _kind_of(hint: Any) -> Kind:
    """The CLI kind of a dataclass field type (``str | None`` -> str, ``bool | str`` -> any).

    A ``Path`` or ``torch.device`` is written as its string on a command line, so
    ``str | Path | None`` and ``str | torch.device | None`` are str keys.
    """
    torch = sys.modules.get("torch")  # imported already when a hint names torch.device
    spelt = {Path: str, **({torch.device: str} if torch is not None else {})}
    args = {spelt.get(a, a) for a in typing.get_args(hint) if a is not type(None)} \
        if typing.get_args(hint) else {hint}
    if typing.get_origin(hint) is typing.Literal:
        return "str" if all(isinstance(a, str) for a in typing.get_args(hint)) else "any"
    if len(args) != 1:
        return "any"
    (only,) = args
    return {bool: "bool", int: "int", float: "float", str: "str"}.get(only, "any")  # type: ignore[return-value]


def choices(hint: Any) -> tuple[Any, ...]:
    """The values a ``Literal[...]`` field type accepts (``()`` for any other type)."""
    return typing.get_args(hint) if typing.get_origin(hint) is typing.Literal else ()


def _dataclass_keys(cls: type, *, exclude: tuple[str, ...] = (), helps: dict[str, str] | None = None) -> list[Key]:
    """The CLI keys of an API dataclass: one per field, with its kind, its default and its help
    (the field's ``metadata["help"]``, else ``helps[name]``). ``{choices}`` in a help becomes
    the values the field's ``Literal`` type accepts (``val, train or test``), so it cannot drift."""
    hints = typing.get_type_hints(cls)
    out = []
    for f in dataclasses.fields(cls):
        if f.name in exclude:
            continue
        default = f.default if f.default is not dataclasses.MISSING else API_DEFAULT
        text = str(f.metadata.get("help", "") or (helps or {}).get(f.name, ""))
        if "{choices}" in text:
            names = [str(c).lower() if isinstance(c, bool) else str(c) for c in choices(hints[f.name])]
            text = text.replace("{choices}", ", ".join(names[:-1]) + " or " + names[-1] if len(names) > 1
                                else "".join(names))
        out.append(Key(name=f.name, kind=_kind_of(hints.get(f.name, Any)), default=default, help=text))
    return out


def _train_keys() -> dict[str, Key] | None:
    try:
        from ..training.config import TrainConfig
    except ModuleNotFoundError as e:
        if (e.name or "").startswith("libreyolo"):
            return None  # keys unknown here; model.train() says what is missing
        raise
    from ..training.config import TRAIN_HELP

    return _as_dict([*_model_keys(), *_dataclass_keys(TrainConfig, exclude=("model", "pretrained"),
                                                       helps=TRAIN_HELP)])


def run_train(kw: dict[str, Any], quiet: bool) -> int:
    from ..model import LibreYOLO

    model = LibreYOLO(kw.pop("model", DEFAULT_MODEL), pretrained=kw.pop("pretrained", True))
    result = model.train(**kw)
    _print_result(result, title="Training finished")
    return 0


_VAL_HELP = {"data": "dataset yaml (or a built-in dataset name); default: the model's training dataset",
             "imgsz": "input size: 640 or h,w", "batch": "images per batch", "conf": "confidence threshold",
             "iou": "NMS IoU threshold", "max_det": "most detections per image", "device": "cpu, cuda, 0, cuda:1",
             "split": "dataset split: {choices}", "cfg": "a YAML file of val keys (keys given here override it)",
             "half": "half precision",
             "workers": "data-loading processes (capped to the CPUs available)",
             "verbose": "per-class table", "plots": "write plots"}


def _val_keys() -> dict[str, Key]:
    from ..engine.validator import ValConfig

    return _as_dict([*_model_keys(), *_dataclass_keys(ValConfig, helps=_VAL_HELP)])


def run_val(kw: dict[str, Any], quiet: bool) -> int:
    from ..model import LibreYOLO

    model = LibreYOLO(kw.pop("model"), pretrained=kw.pop("pretrained"))
    _print_result(model.val(**kw), title="Validation")
    return 0


def _export_keys() -> dict[str, Key]:
    try:
        from ..export.config import ExportConfig
    except ModuleNotFoundError as e:
        if not (e.name or "").startswith("libreyolo"):
            raise
        fields = [Key(name=n) for n in ("format", "imgsz", "batch", "dynamic", "opset", "half", "simplify")]
    else:
        fields = _dataclass_keys(ExportConfig)  # help: the fields' metadata
    return _as_dict([*_model_keys(), *fields])


def run_export(kw: dict[str, Any], quiet: bool) -> int:
    from ..model import LibreYOLO

    model = LibreYOLO(kw.pop("model"), pretrained=kw.pop("pretrained"))
    path = model.export(**kw)
    print(f"Exported to {path}")
    return 0


# ---------------------------------------------------------------------------- convert
def _convert_keys() -> dict[str, Key]:
    return _as_dict([
        Key(name="src", kind="str", default=None,
            help="checkpoint of another library: an Ultralytics .pt, timm .safetensors/.bin (config.json "
                 "beside it) or a Hub snapshot folder"),
        Key(name="model", kind="str", default=None,
            help="expected libreyolo family/size as a weights name, e.g. LibreResNet18-cls.pt (default: detected)"),
        Key(name="out", kind="str", default=None, help="native checkpoint to write (default: <src name>-libreyolo.pt)"),
    ])


def run_convert(kw: dict[str, Any], quiet: bool) -> int:
    from ..convert import load_foreign
    from ..errors import CheckpointError
    from ..io.weights import hub_snapshot_weights
    from ..registry import parse_weights_name

    src = kw.get("src")
    if not src:
        raise ConfigError("convert needs src=<checkpoint of another library>, e.g. "
                          "libreyolo convert src=yolov9t.pt out=LibreYOLO9t-mine.pt")
    given = Path(src).expanduser()
    path = hub_snapshot_weights(given) or given
    if not path.is_file():
        raise CheckpointError(f"src '{src}' does not exist (or is a folder without config.json and "
                              "model.safetensors); check the path.")
    family = size = None
    if kw.get("model"):
        parsed = parse_weights_name(str(kw["model"]))
        family, size = parsed.family, parsed.size
    model = load_foreign(path, family=family)
    if size is not None and model.size != size:
        raise CheckpointError(f"'{src}' converts to {model.FAMILY}-{model.size}, not the size {size!r} that "
                              f"model={kw['model']} names; leave model= out or name size {model.size!r}.")
    out = Path(kw.get("out") or f"{given.name.split('.', 1)[0]}-libreyolo.pt")
    from ..io.checkpoint import save_model

    save_model(model, out)
    print(f"Converted {src} -> {out} ({model.FAMILY}-{model.size}, {model.task}, nc={model.nc})")
    return 0


# ---------------------------------------------------------------------------- benchmark
def _benchmark_keys() -> dict[str, Key]:
    return _as_dict([
        Key(name="model", kind="str", default=DEFAULT_MODEL, pass_default=True, help="weights name or path"),
        Key(name="imgsz", help="input size: 640 or h,w"),
        Key(name="batch", help="batch size, or a list such as 1,8,32"),
        Key(name="cuda_graph", help="false, true, or auto"),
        Key(name="half", kind="bool", help="half precision"),
        Key(name="device", kind="str", help="cpu, cuda, 0, cuda:1"),
        Key(name="warmup", kind="int", help="untimed iterations first"),
        Key(name="iters", kind="int", help="timed iterations"),
        Key(name="out", kind="str", help="folder for the JSON and markdown results"),
    ])


def _load_run_benchmark() -> Callable[..., Any]:
    try:
        from ..bench import run_benchmark  # type: ignore[attr-defined]
    except ImportError as e:  # ModuleNotFoundError included
        if isinstance(e, ModuleNotFoundError) and not (e.name or "").startswith("libreyolo"):
            raise
        raise FeatureUnavailable(
            "the benchmark harness (libreyolo.bench.run_benchmark) is not part of this installation; "
            "update libreyolo or run the scripts under benchmarks/ instead"
        ) from e
    return run_benchmark  # type: ignore[no-any-return]


def run_benchmark(kw: dict[str, Any], quiet: bool) -> int:
    from ..export.registry import format_of_path

    if format_of_path(str(kw.get("model", DEFAULT_MODEL))) is not None:  # an exported file: its runtime
        from ..bench.exported import benchmark_exported

        benchmark_exported(**kw)
        return 0
    fn = _load_run_benchmark()
    params = inspect.signature(fn).parameters
    if not any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
        for key in kw:
            if key not in params:
                raise ConfigError(f"'benchmark' does not take '{key}' in this version; it takes: "
                                  f"{', '.join(p for p in params if p in _benchmark_keys())}")
    result = fn(**kw)
    if result is not None and not isinstance(result, (dict, list)):
        print(f"Benchmark results: {result}")
    return 0


# ---------------------------------------------------------------------------- version
def version_text() -> str:
    import platform

    import torch

    from .._version import __version__

    lines = [f"libreyolo {__version__}",
             f"python {platform.python_version()} ({platform.system()} {platform.machine()})",
             f"torch {torch.__version__}"]
    try:
        import torchvision

        lines.append(f"torchvision {torchvision.__version__}")
    except ImportError:
        lines.append("torchvision not installed")
    if torch.cuda.is_available():
        names = ", ".join(torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count()))
        lines.append(f"CUDA {torch.version.cuda}: {names}")
    else:
        lines.append(f"CUDA not available (torch built with CUDA {torch.version.cuda or 'none'})")
    return "\n".join(lines)


def run_version(kw: dict[str, Any], quiet: bool) -> int:
    print(version_text())
    return 0


def _print_result(result: Any, *, title: str) -> None:
    if isinstance(result, dict):
        print(f"{title}:")
        width = max((len(str(k)) for k in result), default=0)
        for k, v in result.items():
            shown = f"{v:.4f}" if isinstance(v, float) else str(v)
            print(f"  {str(k):<{width}}  {shown}")
    elif result is not None:
        print(f"{title}: {result}")
    else:
        print(title)
    sys.stdout.flush()


COMMANDS: dict[str, Command] = {
    c.name: c
    for c in (
        Command(name="predict", summary="detect objects in images, folders, globs or videos",
                example="libreyolo predict model=LibreYOLO9t.pt source=images/ conf=0.4 --cuda-graph",
                run=run_predict, keys=_predict_keys),
        Command(name="train", summary="train on a YOLO-format dataset yaml",
                example="libreyolo train model=LibreYOLO9t.pt data=my-dataset.yaml epochs=100 --cuda-graph",
                run=run_train, keys=_train_keys),
        Command(name="val", summary="COCO-style metrics (mAP50-95, mAP50, precision, recall) on a dataset",
                example="libreyolo val model=runs/detect/train/weights/best.pt data=my-dataset.yaml",
                run=run_val, keys=_val_keys),
        Command(name="export", summary="export the network (onnx, torchscript, openvino, ncnn, executorch) with portable math",
                example="libreyolo export model=LibreYOLO9t.pt format=onnx imgsz=640 --dynamic",
                run=run_export, keys=_export_keys),
        Command(name="convert", summary="convert a checkpoint of another library (Ultralytics, timm) to libreyolo",
                example="libreyolo convert src=timm-resnet18/ model=LibreResNet18-cls.pt out=LibreResNet18-mine-cls.pt",
                run=run_convert, keys=_convert_keys, loads_model=False),
        Command(name="benchmark", summary="measure eager vs CUDA-graph prediction latency (an export: its runtime)",
                example="libreyolo benchmark model=LibreYOLO9t.pt imgsz=640 batch=1,8 cuda_graph=true out=bench/",
                run=run_benchmark, keys=_benchmark_keys, loads_model=False),
        Command(name="version", summary="print the libreyolo, torch and CUDA versions",
                example="libreyolo version", run=run_version, keys=lambda: {}, loads_model=False),
    )
}
