"""The export format registry: format name -> exporter, file layout and the backend that loads it.

One :class:`ExportFormat` per format, registered by :func:`register_format` (a second entry
under the same name raises). ``model.export(format=...)`` and ``libreyolo export`` find the
exporter here; ``LibreYOLO(path)`` asks :func:`format_of_path` which backend opens a file. The
exporter and backend are named as ``"module:attribute"`` strings and imported on first use,
so an optional runtime (OpenVINO, ONNX Runtime) is only imported when that format is used.

Example:
    >>> from libreyolo.export.registry import get_format, format_names
    >>> get_format("torchscript").suffix
    '.torchscript'
    >>> "onnx" in format_names()
    True
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import ExportError, suggest


@dataclass(frozen=True, kw_only=True)
class ExportFormat:
    """One export format.

    name: the ``format=`` value; suffix: the file suffix (``.onnx``) or, for a format written as
    a folder (``dir_suffix``), the folder name's ending (``_openvino_model``); exporter:
    ``"module:function"`` with signature ``(model, cfg: ExportConfig) -> Path``; backend:
    ``"module:class"`` whose ``cls(path, device=...)`` is the loaded model; extra: the pip extra
    (or package) the format needs; runs: what executes the file (for docs and errors);
    file_suffixes: further suffixes a path may have and still be this format (``.xml``);
    marker: for a folder format, the glob of the graph file that, beside ``libreyolo.json``,
    makes a folder of another name this format (``*.xml``).
    """

    name: str
    suffix: str
    exporter: str
    backend: str
    extra: str
    runs: str
    dir_suffix: bool = False
    file_suffixes: tuple[str, ...] = ()
    marker: str = ""

    def default_path(self, stem: str) -> Path:
        return Path(stem + self.suffix)

    def output_path(self, file: str | None, stem: str) -> Path:
        """Where to write: ``file`` with this format's suffix forced, else ``<stem><suffix>``."""
        if not file:
            return self.default_path(stem)
        p = Path(file)
        if self.dir_suffix:
            return p if p.name.endswith(self.suffix) else p.with_name(p.stem + self.suffix)
        return p if p.suffix == self.suffix else p.with_suffix(self.suffix)

    def matches(self, path: Path) -> bool:
        if self.dir_suffix:
            # by name, or a folder of another name holding an export's metadata beside its graph
            return (path.name.endswith(self.suffix) or path.suffix in self.file_suffixes
                    or (bool(self.marker) and path.is_dir() and (path / "libreyolo.json").is_file()
                        and any(path.glob(self.marker))))
        return path.suffix in (self.suffix, *self.file_suffixes)

    def load_exporter(self) -> Callable[..., Path]:
        return _import(self.exporter)

    def load_backend(self) -> Any:
        return _import(self.backend)


_FORMATS: dict[str, ExportFormat] = {}


def register_format(fmt: ExportFormat) -> ExportFormat:
    """Add a format; a different entry under an existing name raises."""
    if fmt.name in _FORMATS and _FORMATS[fmt.name] != fmt:
        raise ExportError(f"export format {fmt.name!r} is registered twice")
    _FORMATS[fmt.name] = fmt
    return fmt


def format_names() -> tuple[str, ...]:
    return tuple(_FORMATS)


def get_format(name: str) -> ExportFormat:
    """The registered format ``name`` (case-insensitive); an :class:`ExportError` naming the
    close match and every format otherwise."""
    key = str(name).lower()
    if key not in _FORMATS:
        raise ExportError(f"unknown export format {key!r}.{suggest(key, _FORMATS)} "
                          f"Supported formats: {', '.join(_FORMATS)}")
    return _FORMATS[key]


def format_of_path(path: str | Path) -> ExportFormat | None:
    """The format whose layout ``path`` has (``x.onnx``, ``x.torchscript``, an OpenVINO folder or
    its ``.xml``, an NCNN folder or its ``.param``, an ExecuTorch folder or its ``.pte``), or ``None`` for anything else (a checkpoint, a weights name)."""
    p = Path(path)
    for fmt in _FORMATS.values():
        if fmt.matches(p):
            return fmt
    return None


def _import(target: str) -> Any:
    module, _, attr = target.partition(":")
    return getattr(importlib.import_module(module), attr)


register_format(ExportFormat(
    name="onnx", suffix=".onnx", exporter="libreyolo.export.onnx:export_onnx",
    backend="libreyolo.backends.onnxruntime:OnnxBackend", extra="libreyolo[onnx]", runs="ONNX Runtime",
))
register_format(ExportFormat(
    name="torchscript", suffix=".torchscript", exporter="libreyolo.export.torchscript:export_torchscript",
    backend="libreyolo.export.torchscript:TorchScriptBackend", extra="(none: PyTorch)", runs="torch.jit",
    file_suffixes=(".ts",),
))
register_format(ExportFormat(
    name="openvino", suffix="_openvino_model", exporter="libreyolo.export.openvino:export_openvino",
    backend="libreyolo.export.openvino:OpenVINOBackend", extra="libreyolo[openvino]", runs="OpenVINO Runtime",
    dir_suffix=True, file_suffixes=(".xml",), marker="*.xml",
))
register_format(ExportFormat(
    name="ncnn", suffix="_ncnn_model", exporter="libreyolo.export.ncnn:export_ncnn",
    backend="libreyolo.export.ncnn:NCNNBackend", extra="libreyolo[ncnn]", runs="NCNN (CPU)",
    dir_suffix=True, file_suffixes=(".param",), marker="*.ncnn.param",
))
register_format(ExportFormat(
    name="executorch", suffix="_executorch_model", exporter="libreyolo.export.executorch:export_executorch",
    backend="libreyolo.export.executorch:ExecuTorchBackend", extra="libreyolo[executorch]",
    runs="ExecuTorch (XNNPACK, CPU)", dir_suffix=True, file_suffixes=(".pte",), marker="*.pte",
))
