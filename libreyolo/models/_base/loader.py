"""``LibreYOLO(name_or_path)``: the one entry point that turns a name or file into a model."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from ...errors import CheckpointError, ConfigError
from .family import Family


def LibreYOLO(  # noqa: N802 - reads like a class at call sites, as users expect
    model: str | Path = "LibreYOLO9t.pt",
    *,
    pretrained: bool = True,
    nc: int | None = None,
    names: dict[int, str] | list[str] | None = None,
    device: str | None = None,
) -> Any:
    """Build a model from a weights name or file (SPEC U-1).

    Order: an existing local path, ``LIBREYOLO_WEIGHTS_DIR``, weights bundled with the package,
    then the Hugging Face Hub cache / download. A checkpoint of another library (an Ultralytics
    ``.pt``, timm weights with their ``config.json``, or a folder holding both) is recognised and
    converted on load with one log line (:mod:`libreyolo.convert`, docs/weights.md); so is a Hub
    repository of such weights named ``"hf-hub:<owner>/<repo>"`` (Hub cache first, then download). ``pretrained=False`` builds an untrained model of
    the family and size the name describes (``nc``/``names`` set its classes).

    Example:
        >>> from libreyolo import LibreYOLO
        >>> model = LibreYOLO("LibreYOLO9t.pt", pretrained=False, nc=3)
        >>> model.FAMILY, model.size, model.nc
        ('yolo9', 't', 3)
    """
    from ...convert import detect_format, load_foreign
    from ...io.checkpoint import model_from_checkpoint, read_checkpoint
    from ...io.weights import find_weights
    from ...registry import get_family, parse_weights_name

    if not isinstance(model, (str, Path)):
        raise ConfigError(f"LibreYOLO() takes a weights name or path, got {type(model).__name__}")
    name = str(model)
    from ...export.registry import format_of_path

    exported = format_of_path(name)  # .onnx, .torchscript, an OpenVINO folder / .xml (export registry)
    if exported is not None:
        return exported.load_backend()(name, device=device)
    if not pretrained:
        parsed = parse_weights_name(name)
        cls = get_family(parsed.family)
        n = nc if nc is not None else (len(names) if names is not None else 80)
        m: Family = cls(size=parsed.size, task=parsed.task, nc=n, names=names)
    else:
        path = hub_repo_weights(name) or hub_snapshot_weights(Path(name)) or find_weights(name)
        if detect_format(path) is not None:  # another library's checkpoint: convert on load
            m = load_foreign(path)
        else:
            obj = read_checkpoint(path)
            m = model_from_checkpoint(obj, str(path))
        if nc is not None and nc != m.nc:
            raise CheckpointError(
                f"{name!r} was trained with nc={m.nc}; to train on {nc} classes load it as is and pass "
                "your dataset to train() (the head is rebuilt), or use pretrained=False"
            )
    if device is not None:
        m.to(device)
    return m


_SNAPSHOT_WEIGHTS = ("model.safetensors", "pytorch_model.bin")


def hub_snapshot_weights(folder: Path) -> Path | None:
    """The weights file of a Hub snapshot folder (``config.json`` + ``model.safetensors``)."""
    if not (folder.is_dir() and (folder / "config.json").is_file()):
        return None
    for name in _SNAPSHOT_WEIGHTS:
        if (folder / name).is_file():
            return folder / name
    return None


_HUB_ID = re.compile(r"^hf[-_]hub:(?P<repo>[A-Za-z0-9][\w.-]*/[\w.-]+?)(?:@(?P<rev>[\w.-]+))?$")


def hub_repo_weights(name: str) -> Path | None:
    """``"hf-hub:<owner>/<repo>[@revision]"`` -> the local path of its ``model.safetensors`` (with
    ``config.json`` beside it, as the Hub client lays out a snapshot), from the Hub cache or else a
    download; ``None`` for any other name. The explicit prefix keeps local paths such as
    ``runs/best`` from ever being looked up on the Hub.

    Raises:
        CheckpointError: listing what was tried, when neither the cache nor a download has it.
    """
    m = _HUB_ID.match(name)
    if m is None:
        return None
    from ...io.weights import hub_offline_reason

    repo, rev = m["repo"], m["rev"]
    tried: list[str] = []
    for local_only in (True, False):
        where = "Hub cache" if local_only else "Hub download"
        if not local_only:
            offline = hub_offline_reason()
            if offline:
                tried.append(f"{where} (skipped: {offline})")
                break
        try:
            from huggingface_hub import hf_hub_download

            hf_hub_download(repo_id=repo, filename="config.json", revision=rev, local_files_only=local_only)
            for fname in _SNAPSHOT_WEIGHTS:
                try:
                    return Path(hf_hub_download(repo_id=repo, filename=fname, revision=rev,
                                                local_files_only=local_only))
                except Exception as e:  # noqa: BLE001 - try the next file name, then report
                    last = e
            raise last
        except Exception as e:  # noqa: BLE001 - every Hub failure mode becomes one clear error
            msg = str(e).strip().splitlines()[0] if str(e).strip() else ""
            tried.append(f"{where} ({type(e).__name__}{': ' + msg if msg else ''})")
    raise CheckpointError(f"could not get Hub repository {repo!r} (config.json + model.safetensors or "
                          f"pytorch_model.bin); tried: " + "; ".join(tried) + ".")
